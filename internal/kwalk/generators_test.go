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

// TestKernelWalkGenerators: threads that drive generators, coroutines and
// `yield from` in tight loops (each started by _thread, so its outermost
// frame is its own driver function). Every sample the kernel marks complete
// must end at that driver: a stack rooted at a generator frame lost its
// callers, and must be flagged, not reported as whole (3.10–3.15).
func TestKernelWalkGenerators(t *testing.T) {
	testutil.RequireRoot(t)
	drivers := map[string]bool{"drive_for": true, "drive_next": true, "drive_yield_from": true,
		"drive_coro": true, "drive_sum": true, "main": true}
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			wk := startWalking(t, in, 4000, nil, "generators.py")
			w := wk.w
			sym := kwalk.NewSymbolizer(wk.p, wk.kl)
			var complete, flagged, rootless int
			start := time.Now()
			w.SetDeadline(start.Add(250 * time.Millisecond))
			for time.Since(start) < 2*time.Second {
				s, err := w.Read()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					w.SetDeadline(time.Now().Add(250 * time.Millisecond))
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if s.Flags&(kwalk.FlagNoPython|kwalk.FlagEmpty) != 0 {
					continue
				}
				if !s.Complete() {
					flagged++
					continue
				}
				fr, err := sym.Frames(&s)
				if err != nil || len(fr) == 0 {
					continue
				}
				complete++
				if root := fr[len(fr)-1].Function; !drivers[root] && root != "<module>" {
					if rootless < 5 {
						t.Errorf("complete stack rooted at %q: %s", root, stackString(fr))
					}
					rootless++
				}
			}
			t.Logf("%s: %d complete stacks, %d flagged incomplete/torn, %d complete stacks without their driver", in.Label, complete, flagged, rootless)
			if complete < 1000 {
				t.Fatalf("only %d complete stacks in 2 s", complete)
			}
			if rootless > 0 {
				t.Errorf("%d complete stacks are missing their thread's outermost frame", rootless)
			}
		})
	}
}
