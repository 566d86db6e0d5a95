//go:build amd64

package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// namedThreads names three threads after its own pid, each alternating a
// few ms of CPU with a few ms of sleep (samples on and off CPU), and
// prints every thread's native id and name: the target's own account.
const namedThreads = `import os, threading, time
def work():
    while True:
        end = time.perf_counter() + 0.004
        while time.perf_counter() < end:
            pass
        time.sleep(0.004)
ts = [threading.Thread(target=work, name="w%d-%d" % (os.getpid(), i), daemon=True) for i in range(3)]
for t in ts:
    t.start()
time.sleep(0.1)
print("READY", flush=True)
for t in [threading.main_thread()] + ts:
    print("T", t.native_id, t.name, flush=True)
threading.Event().wait()
`

// TestSetThreadNames: record and offcpu --threads on a set of two
// processes name every thread of both by its Python name, each under its
// own process; before, the second process's threads were "thread TID".
func TestSetThreadNames(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	truth := map[int]map[int]string{} // pid -> tid -> name
	var pids []string
	for i := 0; i < 2; i++ {
		tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c", namedThreads), 20*time.Second)
		names := map[int]string{}
		for len(names) < 4 {
			select {
			case l := <-tg.Lines:
				f := strings.Fields(l)
				if len(f) == 3 && f[0] == "T" {
					tid, _ := strconv.Atoi(f[1])
					names[tid] = f[2]
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("pid %d did not list its threads", tg.Pid)
			}
		}
		truth[tg.Pid] = names
		pids = append(pids, "-p", strconv.Itoa(tg.Pid))
	}
	procRe := regexp.MustCompile(`^\[pid (\d+)\] `)
	threadRe := regexp.MustCompile(`^(.+) \((\d+)\)$|^thread (\d+)$`)
	for _, cmd := range []string{"record", "offcpu"} {
		t.Run(cmd, func(t *testing.T) {
			out := t.TempDir() + "/p.folded"
			r := testutil.Run(t, time.Minute, append(append([]string{cmd}, pids...), "--threads", "-d", "2s", "--format", "folded", "-o", out)...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]map[int]bool{}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Split(l, ";")
				if len(f) < 2 {
					continue
				}
				pm := procRe.FindStringSubmatch(f[0])
				tm := threadRe.FindStringSubmatch(f[1])
				if pm == nil || tm == nil {
					continue
				}
				pid, _ := strconv.Atoi(pm[1])
				name, tid := tm[1], tm[2]
				if tm[3] != "" {
					name, tid = "", tm[3]
				}
				n, _ := strconv.Atoi(tid)
				want, ok := truth[pid][n]
				switch {
				case !ok:
					continue // a thread the target did not list (none here)
				case name != want:
					t.Errorf("pid %d thread %d rooted as %q, its name is %q", pid, n, f[1], want)
				}
				if seen[pid] == nil {
					seen[pid] = map[int]bool{}
				}
				seen[pid][n] = true
			}
			for pid, names := range truth {
				for tid, name := range names {
					if name != "MainThread" && !seen[pid][tid] {
						t.Errorf("pid %d: worker %s (%d) has no stack", pid, name, tid)
					}
				}
			}
			if t.Failed() {
				t.Logf("%s", fmt.Sprint(truth))
			}
		})
	}
}
