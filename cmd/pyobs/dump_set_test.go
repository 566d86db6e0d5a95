package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/testutil"
)

// stacksTarget starts stacks.py on in and returns it with the stacks its
// own sys._current_frames() reported.
func stacksTarget(t *testing.T, in testutil.Interp) (*testutil.Target, truthFile) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "truth.json")
	tg := testutil.Start(t, in, "stacks.py", path)
	var truth truthFile
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	return tg, truth
}

func dumpSetJSON(t *testing.T, args ...string) *dump.SetDump {
	t.Helper()
	r := testutil.Run(t, 60*time.Second, append([]string{"dump", "--format", "json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("pyobs dump %v: exit %d, stderr: %s", args, r.Code, r.Stderr)
	}
	var sd dump.SetDump
	if err := json.Unmarshal([]byte(r.Stdout), &sd); err != nil {
		t.Fatalf("dump output is not JSON: %v\n%s", err, r.Stdout)
	}
	if sd.Kind != "process-set" {
		t.Fatalf("kind %q, want process-set:\n%s", sd.Kind, r.Stdout)
	}
	return &sd
}

func findProcess(sd *dump.SetDump, pid int) *dump.ProcessDump {
	for i := range sd.Processes {
		if sd.Processes[i].Pid == pid {
			return &sd.Processes[i]
		}
	}
	return nil
}

// checkProcessTruth: the process was read, and every thread its target
// reported has the same frames (function, file, line) in the set dump.
func checkProcessTruth(t *testing.T, sd *dump.SetDump, pid int, truth truthFile) {
	t.Helper()
	p := findProcess(sd, pid)
	if p == nil {
		t.Errorf("pid %d missing from the set dump", pid)
		return
	}
	if p.Refused != "" || p.Python == nil {
		t.Errorf("pid %d refused: %s", pid, p.Refused)
		return
	}
	got := map[uint64]dump.ThreadDump{}
	for _, th := range p.Threads {
		got[th.ThreadID] = th
	}
	for _, want := range truth.Threads {
		th, ok := got[want.ThreadID]
		if !ok {
			t.Errorf("pid %d: thread %q missing", pid, want.Name)
			continue
		}
		if th.Tid != want.Tid || len(th.Frames) != len(want.Frames) {
			t.Errorf("pid %d thread %q: tid %d, %d frames; want tid %d, %d frames", pid, want.Name, th.Tid, len(th.Frames), want.Tid, len(want.Frames))
			continue
		}
		for i, wf := range want.Frames {
			if gf := th.Frames[i]; gf.Function != wf.Function || gf.File != wf.File || gf.Line != wf.Line {
				t.Errorf("pid %d thread %q frame %d: got %s (%s:%d), want %s (%s:%d)", pid, want.Name, i, gf.Function, gf.File, gf.Line, wf.Function, wf.File, wf.Line)
			}
		}
	}
}

// twoInterpreters picks two interpreters (different versions where the
// machine has them), so one set holds two layouts.
func twoInterpreters(t *testing.T) (testutil.Interp, testutil.Interp) {
	ins := testutil.Interpreters(t)
	if len(ins) == 0 {
		testutil.Skip(t, "no interpreter")
	}
	return ins[0], ins[len(ins)-1]
}

// TestDumpSetPids: dump -p A,B of two real targets (two interpreters):
// each process's threads under its own header, each stack as its target's
// own sys._current_frames() reported it; with --lock too (one process
// stopped at a time).
func TestDumpSetPids(t *testing.T) {
	testutil.RequireRoot(t)
	ia, ib := twoInterpreters(t)
	a, ta := stacksTarget(t, ia)
	b, tb := stacksTarget(t, ib)
	list := fmt.Sprintf("%d,%d", a.Pid, b.Pid)
	for _, lock := range []bool{false, true} {
		args := []string{"-p", list}
		if lock {
			args = append(args, "--lock")
		}
		sd := dumpSetJSON(t, args...)
		if sd.Account.Seen != 2 || sd.Account.Read != 2 || sd.Account.Refused != 0 {
			t.Errorf("lock %v: account %+v, want 2 seen, 2 read", lock, sd.Account)
		}
		checkProcessTruth(t, sd, a.Pid, ta)
		checkProcessTruth(t, sd, b.Pid, tb)
		if lock {
			for _, p := range sd.Processes {
				if p.Read == nil || p.Read.Method != "ptrace-stopped" {
					t.Errorf("--lock: pid %d read %+v", p.Pid, p.Read)
				}
			}
		}
	}
	r := testutil.Run(t, 60*time.Second, "dump", "-p", fmt.Sprint(a.Pid), "-p", fmt.Sprint(b.Pid))
	if r.Code != 0 {
		t.Fatalf("dump text: exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"pyobs dump: 2 processes: 2 read, 0 refused",
		fmt.Sprintf("\nprocess %d: ", a.Pid), fmt.Sprintf("\nprocess %d: ", b.Pid), fmt.Sprintf(", CPython 3.%d", ia.Minor())} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("text dump lacks %q:\n%s", want, r.Stdout)
		}
	}
	// A's threads come under A's header, before B's header.
	ha, hb := strings.Index(r.Stdout, fmt.Sprintf("process %d: ", a.Pid)), strings.Index(r.Stdout, fmt.Sprintf("process %d: ", b.Pid))
	if ta := strings.Index(r.Stdout, fmt.Sprintf("Thread %d ", a.Pid)); !(ha < ta && ta < hb) {
		t.Errorf("pid %d's main thread is not under its header:\n%s", a.Pid, r.Stdout)
	}
}

// makeV2Cgroup creates an empty cgroup v2 directory for the test and
// removes it at cleanup (its processes moved back to the parent first).
func makeV2Cgroup(t *testing.T) string {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(root, &fs); err != nil || fs.Type != 0x63677270 {
			continue
		}
		dir := filepath.Join(root, fmt.Sprintf("pyobs-set-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6))
		if err := os.Mkdir(dir, 0o755); err != nil {
			testutil.Skip(t, fmt.Sprintf("can't create a cgroup v2 directory: %v", err))
		}
		cleanupCgroup(t, dir, filepath.Join(root, "cgroup.procs"))
		return dir
	}
	testutil.Skip(t, "no cgroup v2 hierarchy mounted")
	return ""
}

func joinCgroup(t *testing.T, dir string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0); err != nil {
		t.Fatalf("can't move pid %d into %s: %v", pid, dir, err)
	}
}

// TestDumpSetCgroup: dump --cgroup on a cgroup holding two Python
// processes and a sleep: both Python ones with their stacks, the sleep
// refused with its reason (not an error: exit status 0).
func TestDumpSetCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	dir := makeV2Cgroup(t)
	ia, ib := twoInterpreters(t)
	a, ta := stacksTarget(t, ia)
	b, tb := stacksTarget(t, ib)
	sl := exec.Command("sleep", "60")
	sl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sl.Process.Kill(); _ = sl.Wait() })
	for _, p := range []int{a.Pid, b.Pid, sl.Process.Pid} {
		joinCgroup(t, dir, p)
	}
	sd := dumpSetJSON(t, "--cgroup", dir)
	if sd.Account.Seen != 3 || sd.Account.Read != 2 || sd.Account.Refused != 1 {
		t.Errorf("account %+v, want 3 seen, 2 read, 1 refused", sd.Account)
	}
	checkProcessTruth(t, sd, a.Pid, ta)
	checkProcessTruth(t, sd, b.Pid, tb)
	if p := findProcess(sd, sl.Process.Pid); p == nil || !strings.Contains(p.Refused, "not a Python process") || len(p.Threads) != 0 {
		t.Errorf("sleep: %+v, want refused as not Python", p)
	}
	r := testutil.Run(t, 60*time.Second, "dump", "--cgroup", dir)
	want := fmt.Sprintf("refused:\n  process %d [cgroup]: sleep 60: pid %d (sleep) is not a Python process", sl.Process.Pid, sl.Process.Pid)
	if r.Code != 0 || !strings.Contains(r.Stdout, want) {
		t.Errorf("text dump: exit %d, want %q in:\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	// Nothing Python in the cgroup: the usual error and exit status.
	empty := makeV2Cgroup(t)
	joinCgroup(t, empty, sl.Process.Pid)
	if r := testutil.Run(t, 60*time.Second, "dump", "--cgroup", empty); r.Code != exitNotPython || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Errorf("cgroup with only a sleep: exit %d (want %d), stderr %q", r.Code, exitNotPython, r.Stderr)
	}
}

// TestDumpSetAll: dump --all finds a test target among the machine's
// other Python processes, with its stacks.
func TestDumpSetAll(t *testing.T) {
	testutil.RequireRoot(t)
	ia, _ := twoInterpreters(t)
	a, ta := stacksTarget(t, ia)
	sd := dumpSetJSON(t, "--all")
	checkProcessTruth(t, sd, a.Pid, ta)
	if sd.Account.Read < 1 || sd.Account.Seen != len(sd.Processes) {
		t.Errorf("account %+v for %d processes", sd.Account, len(sd.Processes))
	}
}

// TestDumpSetChildren: dump -- CMD (children followed by default) of a
// parent that forked a child: both under their headers, the child marked
// as the parent's; with one process the output is the one-process dump.
func TestDumpSetChildren(t *testing.T) {
	testutil.RequireRoot(t)
	ia, _ := twoInterpreters(t)
	// The child ends when its parent does (dump --kill ends the parent).
	src := "import os, time\ndef parent_waits():\n    time.sleep(30)\ndef child_sleeps(pp):\n    while os.getppid() == pp:\n        time.sleep(0.05)\npp = os.getpid()\nif os.fork() == 0:\n    child_sleeps(pp)\nelse:\n    parent_waits()\n"
	argv := append(append([]string{}, ia.Argv...), "-c", src)
	sd := dumpSetJSON(t, append([]string{"--after", "500ms", "--kill", "--"}, argv...)...)
	if len(sd.Processes) != 2 {
		t.Fatalf("%d processes, want the parent and its child: %+v", len(sd.Processes), sd.Processes)
	}
	par, kid := sd.Processes[0], sd.Processes[1]
	if kid.Parent != par.Pid || kid.How != "fork" {
		t.Errorf("child %d: parent %d how %q; want parent %d, fork", kid.Pid, kid.Parent, kid.How, par.Pid)
	}
	for _, c := range []struct {
		p    dump.ProcessDump
		want string
	}{{par, "parent_waits"}, {kid, "child_sleeps"}} {
		if len(c.p.Threads) != 1 || len(c.p.Threads[0].Frames) == 0 || c.p.Threads[0].Frames[0].Function != c.want {
			t.Errorf("pid %d: threads %+v, want %s innermost", c.p.Pid, c.p.Threads, c.want)
		}
	}
	// No child: today's one-process document.
	d := dumpJSON(t, append([]string{"--after", "200ms", "--kill", "--"}, append(append([]string{}, ia.Argv...), "-c", "import time; time.sleep(30)")...)...)
	if d.Pid == 0 || len(d.Threads) != 1 {
		t.Errorf("one process: %+v", d)
	}
}

// poolTarget: a multiprocessing Pool(2) with the fork start method (asked
// for explicitly: 3.14 defaults to forkserver), each worker parked in
// task_sleeps, which writes "WORKER pid" first.
const poolTarget = `import multiprocessing as mp, os, sys, time
def task_sleeps(i):
    os.write(1, b"WORKER %d\n" % os.getpid())  # one write: the workers' lines do not mix
    time.sleep(60)
if __name__ == "__main__":
    print("READY", flush=True)  # before the workers' lines
    with mp.get_context("fork").Pool(2) as pool:
        r = pool.map_async(task_sleeps, range(2), chunksize=1)
        r.wait(60)
`

// TestDumpSetPool: dump -p PARENT --children of a fork-started Pool(2)
// after the pool started: both workers (existing descendants at the
// dump's instant) with task_sleeps innermost, marked as the parent's
// children.
func TestDumpSetPool(t *testing.T) {
	testutil.RequireRoot(t)
	ia, _ := twoInterpreters(t)
	script := filepath.Join(t.TempDir(), "pool.py")
	if err := os.WriteFile(script, []byte(poolTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartArgv(t, append(append([]string{}, ia.Argv...), script), 30*time.Second)
	workers := map[int]bool{}
	for len(workers) < 2 {
		select {
		case l := <-tg.Lines:
			var pid int
			if _, err := fmt.Sscanf(l, "WORKER %d", &pid); err == nil {
				workers[pid] = true
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("workers seen: %v", workers)
		}
	}
	t.Cleanup(func() {
		for p := range workers {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	sd := dumpSetJSON(t, "-p", fmt.Sprint(tg.Pid), "--children")
	for p := range workers {
		w := findProcess(sd, p)
		if w == nil {
			t.Errorf("worker %d missing: %+v", p, sd.Processes)
			continue
		}
		if w.How != "fork" || w.Parent != tg.Pid || len(w.Threads) == 0 {
			t.Errorf("worker %d: how %q parent %d (want %d), %d threads, refused %q", p, w.How, w.Parent, tg.Pid, len(w.Threads), w.Refused)
			continue
		}
		found := false
		for _, th := range w.Threads {
			if len(th.Frames) > 0 && th.Frames[0].Function == "task_sleeps" {
				found = true
			}
		}
		if !found {
			t.Errorf("worker %d: no thread in task_sleeps: %+v", p, w.Threads)
		}
	}
}
