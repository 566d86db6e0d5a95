package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpGILHolderNotAsleep: two threads spin in pure Python (they hold the
// GIL only while they run: asleep, a spinner is waiting for the GIL, or for
// the one it dropped it to to take it) and a third sleeps in nanosleep
// holding the GIL, then in select() without it (gil_two_spinners.py). Over
// many dumps, beside a CPU hog, the thread marked as the GIL's holder is
// never one the same dump shows asleep, but for held-sleep in its
// nanosleep. And the mark is still given: to a running spinner, and to
// held-sleep in its nanosleep. Reading the holder once, apart from the
// threads' states, marked a spinner (or held-sleep) asleep in futex in 3-7
// of 60 dumps per version (2 with --lock).
func TestDumpGILHolderNotAsleep(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	type run struct {
		label string
		lock  bool
	}
	var runs []run
	for _, l := range []string{"pyenv-3.10", "pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "sid-3.14", "sid-3.15"} {
		runs = append(runs, run{l, false})
	}
	runs = append(runs, run{"pyenv-3.12", true}, run{"sid-3.14", true})
	for _, r := range runs {
		name := r.label
		if r.lock {
			name += "/lock"
		}
		t.Run(name, func(t *testing.T) {
			in := testutil.Find(t, r.label)
			tg := testutil.Start(t, in, "gil_two_spinners.py")
			names := map[int]string{} // tid → the target's own name for it
			for len(names) < 3 {
				var l struct {
					Name string `json:"name"`
					Tid  int    `json:"tid"`
				}
				line := readTaskTruthLine(t, tg)
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("truth line %q: %v", line, err)
				}
				names[l.Tid] = l.Name
			}
			args := []string{"-p", fmt.Sprint(tg.Pid)}
			if r.lock {
				args = append(args, "--lock")
			}
			const dumps = 60
			spinRunning, heldAsleep, bad, changed := 0, 0, 0, 0
			for i := 0; i < dumps; i++ {
				d := dumpJSON(t, args...)
				if d.Read.GIL == "changed" {
					changed++
				}
				for _, th := range d.Threads {
					if !th.HoldsGIL {
						continue
					}
					asleep := strings.HasPrefix(th.State, "sleeping")
					switch who := names[th.Tid]; {
					case who == "held-sleep" && asleep && (strings.Contains(th.State, "nanosleep") || strings.Contains(th.State, "restart_syscall")):
						// restart_syscall: its nanosleep, resumed after a
						// ptrace stop (--lock) interrupted it.
						heldAsleep++
					case strings.HasPrefix(who, "spin-") && th.State == "running":
						spinRunning++
					case asleep:
						bad++
						t.Errorf("dump %d: thread %d (%q) marked as the GIL's holder while %s", i, th.Tid, who, th.State)
					}
				}
			}
			t.Logf("%s: %d dumps: holder marked on a running spinner %d times, on held-sleep asleep %d times, asleep otherwise %d times; %d dumps saw the GIL change hands",
				name, dumps, spinRunning, heldAsleep, bad, changed)
			// A dump that never marks a holder would pass the check above.
			if spinRunning == 0 || heldAsleep == 0 {
				t.Errorf("holder marked on a running spinner %d times and on held-sleep asleep %d times in %d dumps: want both", spinRunning, heldAsleep, dumps)
			}
		})
	}
}
