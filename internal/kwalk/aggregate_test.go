//go:build amd64

package kwalk_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestAggregateCountsEverySample: with the counts aggregated in the kernel
// (per-CPU caches in front of two hash maps, drained by generation), every
// sample the program counted comes out of DrainCounts exactly once. The
// target calls through many distinct paths, so that the caches' 128 slots
// per CPU are taken over again and again, and the counts are drained every
// 20 ms (150 generations): a count lost at an eviction, or read twice
// across a generation's move, breaks the sum (but for the samples the
// program says raced a drain, CCacheRaced).
func TestAggregateCountsEverySample(t *testing.T) {
	testutil.RequireRoot(t)
	w := startWalkingWith(t, testutil.Find(t, "pyenv-3.12"), kwalk.Options{Freq: 20000, Aggregate: true}, nil, "many_paths.py").w
	var total, drains uint64
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
	// As record ends: the events stopped, one drain takes the rest (the
	// last generation ran 100 ms); a drain after it finds nothing.
	time.Sleep(100 * time.Millisecond)
	w.Stop()
	drain()
	before := total
	drain()
	if total != before {
		t.Errorf("a drain after the last one returned %d samples more", total-before)
	}
	c, err := w.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples counted by the program (%d in the caches, %d raced a drain, %d not: the map full), %d from %d drains, %d distinct keys",
		c[kwalk.CSamples], c[kwalk.CCacheHit], c[kwalk.CCacheRaced], c[kwalk.CAggFull], total, drains, len(keys))
	if c[kwalk.CSamples] < 10000 {
		t.Fatalf("only %d samples in 3 s at 20 kHz: the target did not run", c[kwalk.CSamples])
	}
	// A run that stalled past a drain's wait may have made its samples
	// miss it or come twice; the program counts those.
	if d := int64(total+c[kwalk.CAggFull]) - int64(c[kwalk.CSamples]); d > int64(c[kwalk.CCacheRaced]) || -d > int64(c[kwalk.CCacheRaced]) {
		t.Errorf("the drains returned %d samples (+%d not counted, the map full), the program counted %d (%d raced a drain)", total, c[kwalk.CAggFull], c[kwalk.CSamples], c[kwalk.CCacheRaced])
	}
	// The caches were taken over (more keys than their slots) and served
	// samples, or the test proved nothing about them.
	if len(keys) < 1000 {
		t.Errorf("%d distinct (stack, thread, verdict) keys: too few to take the caches' slots over", len(keys))
	}
	if c[kwalk.CCacheHit] == 0 {
		t.Errorf("no sample counted in a cache: the test proved nothing about them")
	}
}
