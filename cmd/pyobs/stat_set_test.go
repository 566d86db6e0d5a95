package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/stat"
	"github.com/pyobs/pyobs/internal/testutil"
)

// forkBurners is a parent that, once GO_FILE exists, forks two children
// (fork start: os.fork itself) that each burn a known CPU time, print
// their own time.process_time(), idle for 0.6 s (three polls) and exit;
// the parent waits for both and exits.
const forkBurners = `import os, sys, time
go, secs = sys.argv[1], [float(x) for x in sys.argv[2:]]
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
kids = []
for sec in secs:
    pid = os.fork()
    if pid == 0:
        x = 0
        while time.process_time() < sec:
            x += 1
        os.write(1, b"CHILD %d %.6f\n" % (os.getpid(), time.process_time()))  # one write: lines do not mix
        time.sleep(0.6)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
`

// TestStatSetChildren: stat -p PARENT --children on a parent that forks
// two CPU-burning children during the window: each child's CPU within
// ±15 % of what it reports itself (time.process_time()), both accounted
// as joined late and exited, the set's total at least their sum.
func TestStatSetChildren(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t) // built before the clock below starts
	dir := t.TempDir()
	script := filepath.Join(dir, "fork_burners.py")
	if err := os.WriteFile(script, []byte(forkBurners), 0o644); err != nil {
		t.Fatal(err)
	}
	goFile := filepath.Join(dir, "go")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script, goFile, "0.6", "0.3"), 30*time.Second)
	go func() { _, _ = tg.Cmd.Process.Wait() }() // reap the parent: gone, not a zombie
	out := filepath.Join(dir, "st.json")
	wait := runAsync(t, 50*time.Second, "stat", "-p", fmt.Sprint(tg.Pid), "--children", "-d", "40s", "--format", "json", "-o", out)
	time.Sleep(1500 * time.Millisecond) // the window has started: the children are born inside it
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	truth := map[int]float64{}
	for len(truth) < 2 {
		select {
		case l := <-tg.Lines:
			f := strings.Fields(l)
			if len(f) == 3 && f[0] == "CHILD" {
				pid, _ := strconv.Atoi(f[1])
				truth[pid], _ = strconv.ParseFloat(f[2], 64)
			}
		case <-time.After(40 * time.Second):
			t.Fatalf("children reported %v", truth)
		}
	}
	r := wait()
	if r.Code != 0 {
		t.Fatalf("stat: exit %d: %s", r.Code, r.Stderr)
	}
	st := readSetStat(t, out)
	if st.WindowS > 30 {
		t.Errorf("window %.1f s: it should end once every process exited", st.WindowS)
	}
	sum := 0.0
	for pid, want := range truth {
		var p *stat.ProcStat
		for i := range st.Processes {
			if st.Processes[i].Pid == pid {
				p = &st.Processes[i]
			}
		}
		if p == nil {
			t.Errorf("child %d missing: %+v", pid, st.Processes)
			continue
		}
		got := p.UserS + p.SystemS
		sum += got
		t.Logf("child %d: stat %.3f s, its own process_time %.3f s (born %v, exited %v)", pid, got, want, p.Born, p.Exited)
		if got < want*0.85 || got > want*1.15 {
			t.Errorf("child %d: %.3f CPU-s, it reports %.3f (±15 %%)", pid, got, want)
		}
		if p.How != "fork" || p.Parent != tg.Pid || !p.Born || !p.Exited {
			t.Errorf("child %d: how %q parent %d born %v exited %v", pid, p.How, p.Parent, p.Born, p.Exited)
		}
	}
	if st.Account.Seen != 3 || st.Account.Late != 2 || st.Account.Exited != 3 {
		t.Errorf("account %+v, want 3 seen, 2 joined late, 3 exited", st.Account)
	}
	if tot := st.Total.CPU.UserS + st.Total.CPU.SystemS; tot < sum-0.02 {
		t.Errorf("total CPU %.3f s below the children's %.3f", tot, sum)
	}
	if len(st.Verdicts) == 0 {
		t.Errorf("no verdict over the set")
	}
}

// TestStatSetText: two -p targets in text: one line per process, the
// set's account; with -i, a JSON line per interval.
func TestStatSetText(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	a := testutil.Start(t, in, "sleeper.py")
	b := testutil.Start(t, in, "cpu_burn.py")
	r := testutil.Run(t, 30*time.Second, "stat", "-p", fmt.Sprintf("%d,%d", a.Pid, b.Pid), "-d", "600ms")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"pyobs stat: a set of 2 processes", "processes: 2 seen, 0 joined during the window, 0 exited, 0 refused",
		"\nprocesses (", fmt.Sprintf("\n  %d ", a.Pid), fmt.Sprintf("\n  %d ", b.Pid), "\nverdicts:\n", "\nthreads:\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("text lacks %q:\n%s", want, r.Stdout)
		}
	}
	// -i to a pipe: a JSON line per interval, each with both processes.
	r = testutil.Run(t, 30*time.Second, "stat", "-p", fmt.Sprintf("%d,%d", a.Pid, b.Pid), "-i", "300ms", "-d", "1s")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) < 3 {
		t.Fatalf("-i on a set: exit %d, %d lines, stderr %q", r.Code, len(lines), r.Stderr)
	}
	for _, l := range lines {
		var st stat.SetStat
		if err := json.Unmarshal([]byte(l), &st); err != nil || st.Mode != "interval" || len(st.Processes) != 2 || st.Total == nil {
			t.Errorf("interval line %q: %v", l, err)
		}
	}
}

// TestStatSetCgroup: stat --cgroup on a cgroup made by the test holding a
// CPU burner and a sleep; a second sleep moved in mid-window joins late
// (as a cgroup member, not born in the window: counted from its
// discovery).
func TestStatSetCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	dir := makeV2Cgroup(t)
	burner := testutil.Start(t, in, "cpu_burn.py")
	sleeps := make([]*exec.Cmd, 2)
	for i := range sleeps {
		sleeps[i] = exec.Command("sleep", "60")
		sleeps[i].SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := sleeps[i].Start(); err != nil {
			t.Fatal(err)
		}
		c := sleeps[i]
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	joinCgroup(t, dir, burner.Pid)
	joinCgroup(t, dir, sleeps[0].Process.Pid)
	wait := runAsync(t, 30*time.Second, "stat", "--cgroup", dir, "-d", "2s", "--format", "json")
	time.Sleep(time.Second)
	joinCgroup(t, dir, sleeps[1].Process.Pid)
	r := wait()
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var st stat.SetStat
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	by := map[int]stat.ProcStat{}
	for _, p := range st.Processes {
		by[p.Pid] = p
	}
	if p := by[burner.Pid]; p.UserS+p.SystemS < 0.3 || p.JoinedNs != 0 {
		t.Errorf("burner: %+v", p)
	}
	if p, ok := by[sleeps[0].Process.Pid]; !ok || p.UserS+p.SystemS > 0.05 || p.How != "cgroup" {
		t.Errorf("first sleep: %+v", p)
	}
	if p, ok := by[sleeps[1].Process.Pid]; !ok || p.How != "cgroup" || p.JoinedNs < int64(500*time.Millisecond) || p.Born {
		t.Errorf("sleep moved in mid-window: %+v (ok %v)", p, ok)
	}
	if st.Account.Seen != 3 || st.Account.Late != 1 {
		t.Errorf("account %+v, want 3 seen, 1 joined late", st.Account)
	}
}

// runAsync starts pyobs with args; the returned function waits for it (in
// the test's goroutine), killing it after timeout.
func runAsync(t *testing.T, timeout time.Duration, args ...string) func() testutil.Result {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatalf("can't run pyobs %v: %v", args, err)
	}
	return func() testutil.Result {
		timer := time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		_ = cmd.Wait()
		return testutil.Result{Stdout: so.String(), Stderr: se.String(), Code: cmd.ProcessState.ExitCode()}
	}
}

// readSetStat reads the set document stat wrote to out.
func readSetStat(t *testing.T, out string) *stat.SetStat {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var st stat.SetStat
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("not a set document: %v\n%s", err, b)
	}
	return &st
}
