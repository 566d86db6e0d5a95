//go:build amd64

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// The tests of offcpu on a set of processes: a multiprocessing Pool(3)
// (testdata/targets/pool_wait.py, start method fork, the default before
// 3.14) whose workers block in wait_here (10 ms sleeps) and lock_wait (a
// multiprocessing Lock the parent holds for a known span), observed by
// -- CMD (children followed by default) and by -p PARENT --children
// attached after the pool started, with a CPU hog beside. Truth: each
// worker's own timing of its sleeps and of its acquire.

// readWaitTruth is pool_wait.py's account: per worker, seconds slept and
// seconds blocked on the lock.
func readWaitTruth(t *testing.T, path string) workerTruth { return readWorkerTruth(t, path, 2) }

// blockedUnder is perProcess for a folded offcpu profile (µs): per
// process, the seconds of the stacks that hold fn.
func blockedUnder(t *testing.T, folded, fn string) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for pid, p := range perProcess(t, folded, fn) {
		out[pid] = float64(p.inFn) / 1e6
	}
	return out
}

// checkWaits: per worker, the blocked time under wait_here and under
// lock_wait within ±15 % of what it timed, rooted at its own [pid N].
func checkWaits(t *testing.T, name string, tr workerTruth, folded string) {
	t.Helper()
	sleep, lock := blockedUnder(t, folded, "wait_here"), blockedUnder(t, folded, "lock_wait")
	for pid, w := range tr.workers {
		for i, got := range []float64{sleep[pid], lock[pid]} {
			fn := []string{"wait_here", "lock_wait"}[i]
			t.Logf("%s: worker %d: %.3fs under %s, it timed %.3fs", name, pid, got, fn, w[i])
			if d := got/w[i] - 1; d < -0.15 || d > 0.15 {
				t.Errorf("%s: worker %d: %.3fs under %s, want %.3fs ± 15 %% (%+.1f %%)", name, pid, got, fn, w[i], 100*d)
			}
		}
	}
	if sleep[tr.parent] != 0 || lock[tr.parent] != 0 {
		t.Errorf("%s: the parent %d has the workers' waits", name, tr.parent)
	}
}

func poolWaitArgv(py testutil.Interp, args ...string) []string {
	return append(append(append([]string{}, py.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "pool_wait.py")), args...)
}

// TestOffcpuSetPoolSpawn: offcpu -- python3 pool_wait.py follows the
// pool's workers, forked after the attach (they join late): start method
// fork (3.11), and spawn (3.12: each worker execs a new interpreter,
// mapped elsewhere, walked with its own addresses).
func TestOffcpuSetPoolSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	for _, c := range []struct{ label, method string }{{"pyenv-3.11", "fork"}, {"pyenv-3.12", "spawn"}} {
		t.Run(c.label+"/"+c.method, func(t *testing.T) {
			py := testutil.Find(t, c.label)
			dir := t.TempDir()
			truth, out := filepath.Join(dir, "truth"), filepath.Join(dir, "o.folded")
			cmd := exec.Command(testutil.Binary(t), append([]string{"offcpu", "--engine", "bpf", "--format", "folded", "-o", out, "--"},
				poolWaitArgv(py, truth, c.method, "1.0", "1.5", "before")...)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			in, _ := cmd.StdinPipe()
			so, _ := cmd.StdoutPipe() // -o FILE: the program keeps pyobs's stdout
			var se strings.Builder
			cmd.Stderr = &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			readLines(so).expect(t, "READY")
			testutil.WaitBPFLink(t, cmd.Process.Pid, 30*time.Second)
			time.Sleep(200 * time.Millisecond) // the seed goes in right after the links
			fmt.Fprintln(in, "go")
			runUntil(t, cmd, &se)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			tr := readWaitTruth(t, truth)
			checkWaits(t, "-- CMD "+c.method, tr, string(b))
			if !strings.Contains(se.String(), "pyobs offcpu: processes: ") || !strings.Contains(se.String(), " 0 refused") {
				t.Errorf("no account of the set in the footer, or a member refused:\n%s", se.String())
			}
			for pid := range tr.workers {
				if !strings.Contains(se.String(), fmt.Sprintf("pid %d (fork by %d", pid, tr.parent)) {
					t.Errorf("worker %d not accounted as forked by %d:\n%s", pid, tr.parent, se.String())
				}
			}
		})
	}
}

// TestOffcpuSetAttachChildren: -p PARENT --children after the pool
// started: the existing workers join at the start.
func TestOffcpuSetAttachChildren(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	py := testutil.Find(t, "pyenv-3.11")
	dir := t.TempDir()
	truth := filepath.Join(dir, "truth")
	folded := filepath.Join(dir, "o.folded")
	se := attachToPool(t, poolWaitArgv(py, truth, "fork", "1.0", "1.5", "stdin"),
		"offcpu", "--engine", "bpf", "--children", "--format", "folded", "-o", folded)
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	checkWaits(t, "-p PARENT --children", readWaitTruth(t, truth), string(b))
	if !strings.Contains(se, "pyobs offcpu: processes: 4 seen") {
		t.Errorf("no account of the set in the footer:\n%s", se)
	}
}

// TestOffcpuSetRefusals: --greenlets refuses a set in one line; the perf
// engine observes the target alone and says so.
func TestOffcpuSetRefusals(t *testing.T) {
	r := testutil.Run(t, 30*time.Second, "offcpu", "--greenlets", "-p", "1,2")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--greenlets observes one process") || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
		t.Errorf("exit %d, stderr %q: want one line refusing --greenlets on a set", r.Code, r.Stderr)
	}
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "sleeper.py")
	r = testutil.Run(t, 30*time.Second, "offcpu", "--engine", "perf", "-p", strconv.Itoa(tg.Pid), "--children", "-d", "300ms", "--format", "text")
	if r.Code != 0 || !strings.Contains(r.Stderr, fmt.Sprintf("the perf engine observes pid %d alone", tg.Pid)) {
		t.Errorf("exit %d, stderr %q: want the perf engine to say it observes the target alone", r.Code, r.Stderr)
	}
}

// TestOffcpuSetCgroup: --cgroup on a cgroup v2 made here holding two
// Python processes of one build and one of another: the first two's
// sleeps under their own roots and functions, the third refused (another
// build: not walked) with its reason, its time still under its root.
func TestOffcpuSetCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	dir := makeV2Cgroup(t)
	pys := []testutil.Interp{testutil.Find(t, "pyenv-3.12"), testutil.Find(t, "pyenv-3.12"), testutil.Find(t, "pyenv-3.11")}
	var pids []int
	for i, fn := range []string{"nap_one", "nap_two", "nap_other"} {
		pids = append(pids, startInCgroup(t, dir, pys[i], fmt.Sprintf("import sys, time\ndef %s():\n    while True:\n        time.sleep(0.02)\nprint('READY', flush=True)\nsys.stdin.readline()\n%s()\n", fn, fn)))
	}
	r := testutil.Run(t, 60*time.Second, "offcpu", "--engine", "bpf", "--cgroup", dir, "-d", "1s", "--format", "folded")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for i, fn := range []string{"nap_one", "nap_two"} {
		if s := blockedUnder(t, r.Stdout, fn)[pids[i]]; s < 0.8 {
			t.Errorf("process %d: %.3fs under %s, want most of the 1 s window\n%s", pids[i], s, fn, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "nap_other (") || !strings.Contains(r.Stdout, fmt.Sprintf("[pid %d]", pids[2])) {
		t.Errorf("the 3.11 process named, or its waits missing:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "processes: 3 seen") || !strings.Contains(r.Stderr, "1 refused") ||
		!strings.Contains(r.Stderr, "refused: CPython 3.11.7 build differs from the target's 3.12.1") {
		t.Errorf("the footer's account: %s", r.Stderr)
	}
}

// TestOffcpuSetBlockedWholeWindow: a member other than the first, whose
// thread is blocked for the whole window (no switch event at all), is
// off CPU for it under its own Python stack, read through its own reader
// at the attach — not on CPU (the account once judged such a thread by
// the first member's threads alone).
func TestOffcpuSetBlockedWholeWindow(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	first := startInline(t, py, "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.005)\n", nil)
	parked := startInline(t, py, "import time\ndef parked():\n    time.sleep(600)\nprint('READY', flush=True)\nparked()\n", nil)
	time.Sleep(200 * time.Millisecond) // in its sleep
	out := filepath.Join(t.TempDir(), "o.folded")
	r := testutil.Run(t, time.Minute, "offcpu", "--engine", "bpf", "-p", fmt.Sprintf("%d,%d", first.Pid, parked.Pid), "-d", "1s", "--format", "folded", "-o", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, _ := os.ReadFile(out)
	got := blockedUnder(t, string(b), "parked")[parked.Pid]
	if got < 0.8 {
		t.Errorf("pid %d blocked %.3fs under parked over a 1 s window, want ≥ 0.8 s:\n%s\n%s", parked.Pid, got, b, r.Stderr)
	}
}
