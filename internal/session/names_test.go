package session

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestMemberNamesFirstLook: a set member's namer made when its threads
// are named already (its interpreter read late: roots were made unnamed
// before) reports those names at its first Look, so that the roots are
// renamed; a second Look reports nothing new. After an exec (another
// interpreter for the pid) the threads are new generations. Truth: the
// target's own listing of its threads.
func TestMemberNamesFirstLook(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c", `import threading, time
ev = threading.Event()
t = threading.Thread(target=ev.wait, name="worker-x", daemon=True)
t.start()
print("READY", flush=True)
print(threading.main_thread().native_id, t.native_id, flush=True)
ev.wait()`), 20*time.Second)
	var mainTid, workerTid int
	select {
	case l := <-tg.Lines:
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("target said %q", l)
		}
		mainTid, _ = strconv.Atoi(f[0])
		workerTid, _ = strconv.Atoi(f[1])
	case <-time.After(10 * time.Second):
		t.Fatal("the target did not list its threads")
	}
	py, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ms := NewMemberNames(procfs.Default())
	n := ms.Of(tg.Pid, py)
	if got := n.Name(ThreadGen{Tid: workerTid, Gen: n.Gen(workerTid)}); got != "worker-x" {
		t.Fatalf("the namer's first read: %q, want worker-x", got)
	}
	learned := map[int]string{}
	look := func() {
		ms.Look(time.Now().Add(time.Minute), func(pid int, k ThreadGen, name string) {
			if pid == tg.Pid {
				learned[k.Tid] = name
			}
		})
	}
	look()
	if learned[mainTid] != "MainThread" || learned[workerTid] != "worker-x" {
		t.Errorf("first Look reported %v, want MainThread (%d) and worker-x (%d)", learned, mainTid, workerTid)
	}
	learned = map[int]string{}
	look()
	if len(learned) != 0 {
		t.Errorf("a second Look reported %v again", learned)
	}
	// Another interpreter for the pid (as after an exec): new generations.
	py2, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	n2 := ms.Of(tg.Pid, py2)
	if g, g2 := n.Gen(workerTid), n2.Gen(workerTid); g2 <= g {
		t.Errorf("after the exec the worker's generation is %d, before %d: its new roots would merge with the old", g2, g)
	}
}
