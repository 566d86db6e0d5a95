package pyframes

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// countMem counts the reads (syscalls: one per Read or ReadV) a walk makes.
type countMem struct {
	m     Memory
	reads int
}

func (c *countMem) Read(addr uint64, p []byte) error { c.reads++; return c.m.Read(addr, p) }

func (c *countMem) ReadV(segs []Seg) int { c.reads++; return readV(c.m, segs) }

// TestStackReadsBatched: a thread 400 frames deep (several data-stack
// chunks) and one parked under 60 generators delegating with `yield from`
// (each frame in its own heap object) are read in a few batched reads each,
// not one per frame, once their code objects are cached.
func TestStackReadsBatched(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "deep_mixed.py")), 30*time.Second)
			time.Sleep(200 * time.Millisecond) // the main thread walks down its generator chain
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Threads(Options{}); err != nil { // code objects into the cache
				t.Fatal(err)
			}
			refs, err := p.ThreadRefs()
			if err != nil {
				t.Fatal(err)
			}
			cm := &countMem{m: p.objs.mem}
			p.objs.mem = cm
			for _, ref := range refs {
				cm.reads = 0
				fr, consistent, _, err := p.Stack(ref.Addr, Options{})
				if err != nil || !consistent {
					t.Fatalf("thread 0x%x: %v (consistent %v)", ref.Addr, err, consistent)
				}
				t.Logf("thread 0x%x: %d frames in %d reads", ref.Addr, len(fr), cm.reads)
				// A few for the thread state, window, re-check and cached
				// code objects' validation, then about one per 2-page
				// region of frames (was one per frame outside the window).
				if len(fr) > 50 && cm.reads > 16+len(fr)/32 {
					t.Errorf("thread 0x%x: %d frames took %d reads", ref.Addr, len(fr), cm.reads)
				}
			}
		})
	}
}
