package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// shortKids is a parent that, once GO_FILE exists, forks children one
// after another, each burning a given CPU time and exiting at once (no
// idle tail before its exit: what it burns after the last poll is the part
// a poll cannot read); it waits for each, prints its own os.times()
// children CPU over the forks, and stays 1.5 s so stat reads it after the
// last reap.
const shortKids = `import os, sys, time
go, n, sec = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
t0 = os.times()
for i in range(n):
    pid = os.fork()
    if pid == 0:
        end = time.process_time() + sec
        while time.process_time() < end:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
t1 = os.times()
print("CHILDREN %.6f" % ((t1.children_user + t1.children_system) - (t0.children_user + t0.children_system)), flush=True)
time.sleep(1.5)
`

// TestStatSetShortChildrenExact: stat -p PARENT --children on a parent
// that forks six children in turn, each burning 0.25 s and exiting: the
// CPU the children are credited with is within 10 % of the parent's own
// os.times() children fields over the forks (exact: the kernel adds each
// reaped child's whole CPU), a CPU hog beside. Up to the last poll only,
// they got about two thirds.
func TestStatSetShortChildrenExact(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	testutil.CPUHog(t, 1)
	dir := t.TempDir()
	script := filepath.Join(dir, "short_kids.py")
	if err := os.WriteFile(script, []byte(shortKids), 0o644); err != nil {
		t.Fatal(err)
	}
	goFile := filepath.Join(dir, "go")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script, goFile, "6", "0.25"), 60*time.Second)
	go func() { _, _ = tg.Cmd.Process.Wait() }()
	out := filepath.Join(dir, "st.json")
	wait := runAsync(t, 70*time.Second, "stat", "-p", fmt.Sprint(tg.Pid), "--children", "-d", "50s", "--format", "json", "-o", out)
	time.Sleep(1500 * time.Millisecond) // the window has started
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	truth := -1.0
	for truth < 0 {
		select {
		case l := <-tg.Lines:
			if f := strings.Fields(l); len(f) == 2 && f[0] == "CHILDREN" {
				truth, _ = strconv.ParseFloat(f[1], 64)
			}
		case <-time.After(50 * time.Second):
			t.Fatal("the parent did not report its children's CPU")
		}
	}
	r := wait()
	if r.Code != 0 {
		t.Fatalf("stat: exit %d: %s", r.Code, r.Stderr)
	}
	st := readSetStat(t, out)
	got, kids := 0.0, 0
	for _, p := range st.Processes {
		if p.Pid == tg.Pid {
			continue
		}
		kids++
		got += p.UserS + p.SystemS
		t.Logf("child %d: %.3f s, exited %v", p.Pid, p.UserS+p.SystemS, p.Exited)
	}
	t.Logf("children: stat %.3f CPU-s over %d, the parent's os.times() %.3f", got, kids, truth)
	if truth < 1.2 {
		t.Fatalf("the children burnt %.3f s, not 6 × 0.25", truth)
	}
	if got < truth*0.9 || got > truth*1.1 {
		t.Errorf("children credited %.3f CPU-s, the parent reaped %.3f (±10 %%)", got, truth)
	}
}
