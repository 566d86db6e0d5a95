//go:build amd64

package procset_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/procset/countbpf"
	"github.com/pyobs/pyobs/internal/testutil"
)

// forker: waits for "go" on stdin, then forks 3 children that each make
// 2,000 getppid calls and exit (a grandchild under the first), and prints
// the children's pids (its own truth) before it exits.
const forker = `
import os, sys
print("READY", flush=True)
sys.stdin.readline()
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        if i == 0:
            g = os.fork()
            if g == 0:
                for _ in range(2000): os.getppid()
                os._exit(0)
            os.waitpid(g, 0)
            print("GRANDCHILD", g, flush=True)
        for _ in range(2000): os.getppid()
        os._exit(0)
    kids.append(pid)
for k in kids: os.waitpid(k, 0)
print("KIDS", " ".join(map(str, kids)), flush=True)
sys.stdin.readline()
`

func load(t *testing.T, o procset.Options) (*countbpf.CountObjects, *procset.Set) {
	t.Helper()
	testutil.RequireRoot(t)
	spec, err := countbpf.LoadCount()
	if err != nil {
		t.Fatal(err)
	}
	if err := procset.Configure(spec, o); err != nil {
		t.Fatal(err)
	}
	var objs countbpf.CountObjects
	if err := bpfload.Load("procset test", spec, &objs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	l, _, err := bpfload.Attach(objs.CountEnter, "sys_enter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	set, err := procset.Start(procset.Handles{Procs: objs.Procs, Events: objs.ProcsetEvents, Counters: objs.ProcsetCounters,
		Fork: objs.ProcsetFork, Exec: objs.ProcsetExec, Exit: objs.ProcsetExit}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	return &objs, set
}

func TestChildrenJoinAtFork(t *testing.T) {
	interp := testutil.Interpreters(t)[0]
	script := filepath.Join(t.TempDir(), "forker.py")
	if err := os.WriteFile(script, []byte(forker), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := startWithStdin(t, append(append([]string{}, interp.Argv...), script))
	objs, set := load(t, procset.Options{Seeds: []int{tg.pid}, Children: true})
	var changes atomic.Int64
	set.OnChange(func() { changes.Add(1) })
	tg.send("go")
	grand := tg.expect(t, "GRANDCHILD") // printed by the first child before the parent's KIDS
	kids := tg.expect(t, "KIDS")
	truth := append(fields(t, kids), fields(t, grand)...)
	time.Sleep(100 * time.Millisecond) // the exit events reach the reader
	set.Close()
	for _, pid := range truth {
		m, ok := set.Member(pid)
		if !ok {
			t.Fatalf("child %d never joined; members %+v", pid, set.Members())
		}
		if m.How != procset.Fork || !m.Exited || m.Began != m.Joined || m.Joined == 0 {
			t.Errorf("child %d: %+v, want joined by fork and exited, its program begun at its join", pid, m)
		}
		var n uint64
		if err := objs.Calls.Lookup(uint32(pid), &n); err != nil || n < 2000 {
			t.Errorf("child %d: %d syscalls counted (%v), want >= 2000 getppid", pid, n, err)
		}
	}
	if st := set.Stats(); st.Late != 4 || st.Exited != 4 || st.Lost != 0 {
		t.Errorf("stats %+v, want 4 joined late and exited, none lost", st)
	}
	if n := changes.Load(); n != 4 {
		t.Errorf("OnChange called %d times, want once per join (4)", n)
	}
	if !set.Starting(truth[0]) || set.Starting(tg.pid) {
		t.Errorf("Starting: child %v, seed %v; want a child just forked starting, the seed not", set.Starting(truth[0]), set.Starting(tg.pid))
	}
	if m, _ := set.Member(truth[3]); m.Parent != truth[0] {
		t.Errorf("grandchild's parent %d, want %d", m.Parent, truth[0])
	}
}

func TestNoChildrenWithoutFollow(t *testing.T) {
	interp := testutil.Interpreters(t)[0]
	script := filepath.Join(t.TempDir(), "forker.py")
	if err := os.WriteFile(script, []byte(forker), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := startWithStdin(t, append(append([]string{}, interp.Argv...), script))
	objs, set := load(t, procset.Options{Seeds: []int{tg.pid}})
	tg.send("go")
	for _, pid := range fields(t, tg.expect(t, "KIDS")) {
		var n uint64
		if objs.Calls.Lookup(uint32(pid), &n) == nil || set.Has(pid) {
			t.Errorf("child %d counted (%d) or a member without --children", pid, n)
		}
	}
	var n uint64
	if err := objs.Calls.Lookup(uint32(tg.pid), &n); err != nil || n == 0 {
		t.Errorf("the seed's syscalls were not counted (%d, %v)", n, err)
	}
}

func fields(t *testing.T, line string) []int {
	var out []int
	for _, f := range strings.Fields(line)[1:] {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		out = append(out, n)
	}
	return out
}

// threadExec: on "go", a thread other than the main one execs a new
// python that makes 2,000 getppid calls, prints DONE and waits for stdin.
const threadExec = `
import os, sys, threading
print("READY", flush=True)
sys.stdin.readline()
code = "import os,sys\nfor _ in range(2000): os.getppid()\nprint('DONE', flush=True)\nsys.stdin.readline()\n"
threading.Thread(target=os.execv, args=(sys.executable, [sys.executable, "-c", code])).start()
threading.Event().wait()
`

// TestExecFromThread: an exec from a thread that is not the leader ends
// the old leader, not the process: it stays a member, counted after.
func TestExecFromThread(t *testing.T) {
	interp := testutil.Interpreters(t)[0]
	script := filepath.Join(t.TempDir(), "texec.py")
	if err := os.WriteFile(script, []byte(threadExec), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := startWithStdin(t, append(append([]string{}, interp.Argv...), script))
	objs, set := load(t, procset.Options{Seeds: []int{tg.pid}})
	tg.send("go")
	tg.expect(t, "DONE")
	time.Sleep(100 * time.Millisecond)
	m, ok := set.Member(tg.pid)
	if !ok || m.Exited || m.Execs != 1 {
		t.Fatalf("after an exec from a thread: %+v (member %v), want a member with one exec, not exited", m, ok)
	}
	if m.Began == 0 || !set.Starting(tg.pid) {
		t.Errorf("after its exec the seed's program began at %d (starting %v): want the exec's time", m.Began, set.Starting(tg.pid))
	}
	var n uint64
	if err := objs.Calls.Lookup(uint32(tg.pid), &n); err != nil || n < 2000 {
		t.Errorf("%d syscalls counted (%v), want >= 2000 after the exec", n, err)
	}
}
