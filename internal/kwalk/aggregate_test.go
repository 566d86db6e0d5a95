//go:build amd64

package kwalk_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestAggregateCountsEverySample: with the counts aggregated in the kernel
// (per-CPU caches in front of two hash maps, drained by generation), every
// sample the program counted comes out of DrainCounts exactly once. The
// target calls through many distinct paths, so that the caches' 128 slots
// per CPU are taken over again and again, and the counts are drained every
// 20 ms (150 generations): a count lost at an eviction, or read twice
// across a generation's move, breaks the sum.
func TestAggregateCountsEverySample(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "many_paths.py")
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatalf("pyframes.Open: %v", err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatalf("KernelLayout: %v", err)
	}
	w, err := kwalk.Open(tg.Pid, kl, kwalk.Options{Freq: 20000, Aggregate: true})
	if errors.Is(err, kwalk.ErrUnavailable) {
		testutil.Skip(t, fmt.Sprintf("loading a perf_event eBPF program with bpf_loop: %v", err))
	}
	if err != nil {
		t.Fatalf("kwalk.Open: %v", err)
	}
	defer w.Close()
	refs, err := p.ThreadRefs()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetThreads(refs); err != nil {
		t.Fatal(err)
	}
	var total, drains, multi uint64
	keys := map[kwalk.Count]bool{}
	drain := func() {
		// The ring first: it holds the stacks; the test needs only the counts.
		w.SetDeadline(time.Now())
		for {
			if _, err := w.Read(); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Read: %v", err)
				}
				break
			}
		}
		if err := w.DrainCounts(func(c kwalk.Count) {
			total += c.N
			if c.N > 1 {
				multi++
			}
			c.N = 0
			keys[c] = true
		}); err != nil {
			t.Fatalf("DrainCounts: %v", err)
		}
		drains++
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
		drain()
	}
	w.Stop()
	// A run that began before Stop may count into the generation after
	// the one drained then: two more drains take both.
	drain()
	drain()
	c, err := w.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples counted by the program (%d not: the map full), %d from %d drains, %d distinct keys, %d counts of more than one sample",
		c[kwalk.CSamples], c[kwalk.CAggFull], total, drains, len(keys), multi)
	if c[kwalk.CSamples] < 10000 {
		t.Fatalf("only %d samples in 3 s at 20 kHz: the target did not run", c[kwalk.CSamples])
	}
	if total+c[kwalk.CAggFull] != c[kwalk.CSamples] {
		t.Errorf("the drains returned %d samples (+%d not counted, the map full), the program counted %d", total, c[kwalk.CAggFull], c[kwalk.CSamples])
	}
	// The caches were taken over (more keys than their slots) and served
	// (counts of several samples), or the test proved nothing about them.
	if len(keys) < 1000 {
		t.Errorf("%d distinct (stack, thread, verdict) keys: too few to take the caches' slots over", len(keys))
	}
	if multi == 0 {
		t.Errorf("no count of more than one sample: the caches served nothing")
	}
}
