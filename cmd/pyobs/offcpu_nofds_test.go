package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestOffcpuNoFdsSleep: a select or poll given no descriptor and a
// timeout only sleeps — CPython 3.10's time.sleep is pselect6(0, NULL,
// NULL, NULL, &ts), and select.select([], [], [], t) and an empty
// poll() are the same on every version — so its wait is class sleep, not
// network/poll; a select on a socket stays network/poll. offcpu_nofds.py
// times each of its threads' waits itself (the truth); on both engines,
// with a CPU hog on every CPU, each thread's time in its class (plus its
// run-queue after the waking and, perf, its waits nobody read) must make
// up that time, under its own Python function, and none of it go to the
// other class.
func TestOffcpuNoFdsSleep(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, runtime.NumCPU())
	for _, label := range []string{"pyenv-3.10", "pyenv-3.13"} {
		for _, engine := range []string{offcpu.EngineBPF, offcpu.EnginePerf} {
			t.Run(label+"/"+engine, func(t *testing.T) {
				py := testutil.Find(t, label)
				truthPath := filepath.Join(t.TempDir(), "truth")
				args := append([]string{"offcpu", "--engine", engine, "--threads", "--format", "json", "--"}, py.Argv...)
				r := testutil.Run(t, 60*time.Second, append(args, filepath.Join(testutil.Repo(), "testdata", "targets", "offcpu_nofds.py"), truthPath, "1.5")...)
				if r.Code != 0 {
					t.Fatalf("exit %d: %s", r.Code, r.Stderr)
				}
				var truth map[string]float64
				b, err := os.ReadFile(truthPath)
				if err != nil || json.Unmarshal(b, &truth) != nil {
					t.Fatalf("no truth from the program (%v): %s", err, b)
				}
				var o offcpuJSON
				if err := json.Unmarshal([]byte(r.Stdout), &o); err != nil {
					t.Fatalf("json: %v\n%s", err, r.Stdout)
				}
				for _, c := range []struct{ thread, fn, class, not string }{
					{"napper", "nap", offcpu.ClassSleep, offcpu.ClassNet},
					{"emptysel", "empty_select", offcpu.ClassSleep, offcpu.ClassNet},
					{"emptypoll", "poll_nothing", offcpu.ClassSleep, offcpu.ClassNet},
					{"sockwait", "wait_socket", offcpu.ClassNet, offcpu.ClassSleep},
				} {
					want := truth[c.fn]
					_, _, rq, cl := o.thread(t, c.thread)
					short := o.short(c.thread)
					under := 0.0
					for _, s := range o.Top {
						if s.Class == c.class && strings.Contains(s.Stack, ";"+c.fn+" (") {
							under += float64(s.US) / 1e6
						}
					}
					t.Logf("%-9s %s %.3fs (%.3fs under %s), %s %.3fs, run-queue %.3fs, not read %.3fs; the thread timed %.3fs in %s",
						c.thread, c.class, cl[c.class], under, c.fn, c.not, cl[c.not], rq, short, want, c.fn)
					if want < 1 {
						t.Fatalf("%s timed %.3fs in %s: the program did not run its waits", c.thread, want, c.fn)
					}
					if cl[c.not] > 0.001 {
						t.Errorf("%s: %.3fs of %s waits, want none: its only waits are %s", c.thread, cl[c.not], c.not, c.class)
					}
					// The class holds no more than the thread's waits (its
					// other waits are GIL and thread start-up futexes), and
					// with what the hog delayed and nobody read, all of them.
					if got := cl[c.class]; got > want+0.02 || got+rq+short < 0.9*want || got < 0.4*want {
						t.Errorf("%s: %s %.3fs (+%.3fs run-queue, +%.3fs not read), want the %.3fs it timed in %s", c.thread, c.class, got, rq, short, want, c.fn)
					}
					if under < 0.4*want {
						t.Errorf("%s: %.3fs of %s under %s in the profile, want most of its %.3fs", c.thread, under, c.class, c.fn, want)
					}
				}
			})
		}
	}
}
