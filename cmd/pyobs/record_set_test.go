//go:build amd64

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/testutil"
)

// The tests of record on a set of processes: a multiprocessing Pool(3)
// (testdata/targets/pool_target.py; start method fork, stated per run:
// fork is the default before 3.14, and sid's 3.14/3.15 here can't exec
// themselves without their loader wrapper), attached by -- CMD and by
// -p PARENT --children, a cgroup holding two Python processes, and the
// program's stdout kept out of every text format.

const setFreq = 199

// workerTruth is a pool target's own account (pool_target.py,
// pool_wait.py): its parent, and per worker pid the values it measured.
type workerTruth struct {
	parent  int
	workers map[int][]float64
}

// readWorkerTruth reads "PARENT pid" and "WORKER pid v1 … vn" lines; three
// workers are expected.
func readWorkerTruth(t *testing.T, path string, n int) workerTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the target wrote no truth: %v", err)
	}
	tr := workerTruth{workers: map[int][]float64{}}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "PARENT":
			tr.parent, _ = strconv.Atoi(f[1])
		case len(f) == 2+n && f[0] == "WORKER":
			pid, _ := strconv.Atoi(f[1])
			for _, v := range f[2:] {
				x, _ := strconv.ParseFloat(v, 64)
				tr.workers[pid] = append(tr.workers[pid], x)
			}
		}
	}
	if tr.parent == 0 || len(tr.workers) != 3 {
		t.Fatalf("bad truth file: %q", b)
	}
	return tr
}

// readPoolTruth is pool_target.py's account: per worker, CPU seconds in burn.
func readPoolTruth(t *testing.T, path string) workerTruth { return readWorkerTruth(t, path, 1) }

// perProcess sums a folded profile by its "[pid N] argv" roots: all
// weight, and the weight of the stacks that hold fn.
type procSamples struct{ all, inFn, marked int64 }

func perProcess(t *testing.T, folded, fn string) map[int]procSamples {
	t.Helper()
	out := map[int]procSamples{}
	for _, l := range strings.Split(strings.TrimSpace(folded), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		w, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("bad folded line %q", l)
		}
		if !strings.HasPrefix(l, "[pid ") {
			t.Fatalf("a stack not rooted at its process: %q", l)
		}
		pid, err := strconv.Atoi(l[len("[pid "):strings.IndexByte(l, ']')])
		if err != nil {
			continue // [pid ?]: a thread gone before its process was known (offcpu)
		}
		p := out[pid]
		p.all += w
		if strings.Contains(l[:i], ";"+fn+" (") {
			p.inFn += w
		}
		if j := strings.IndexByte(l, ';'); j >= 0 && strings.HasPrefix(l[j+1:], "[") {
			p.marked += w // not walked to a Python stack: [invalid frame chain], [unreadable], …
		}
		out[pid] = p
	}
	return out
}

// checkPool: each worker in the stacks, the workers' samples within ±15 %
// of their CPU seconds × F, ≥ 90 % of them in burn.
func checkPool(t *testing.T, name string, tr workerTruth, folded string) {
	t.Helper()
	per := perProcess(t, folded, "burn")
	var samples, inBurn int64
	var cpu float64
	for pid, w := range tr.workers {
		c := w[0]
		p, ok := per[pid]
		if !ok || p.inFn == 0 {
			t.Errorf("%s: worker %d not in the stacks (%+v)", name, pid, per)
		}
		samples += p.all
		inBurn += p.inFn
		cpu += c
	}
	want := cpu * setFreq
	t.Logf("%s: workers' samples %d, in burn %d; their CPU %.2fs × %d Hz = %.0f; per process %+v", name, samples, inBurn, cpu, setFreq, want, per)
	if d := float64(samples)/want - 1; d < -0.15 || d > 0.15 {
		t.Errorf("%s: %d worker samples, want %.0f ± 15 %% (%+.1f %%)", name, samples, want, 100*d)
	}
	if samples == 0 || float64(inBurn) < 0.9*float64(samples) {
		t.Errorf("%s: %d of %d worker samples in burn, want ≥ 90 %%", name, inBurn, samples)
	}
}

// lineReader hands out a process's stdout lines.
type lineReader chan string

func readLines(r io.Reader) lineReader {
	ch := make(lineReader, 256)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch
}

func (ch lineReader) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("output ended before a %q line", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q line within 60 s", prefix)
		}
	}
}

func poolArgv(py testutil.Interp, args ...string) []string {
	return append(append(append([]string{}, py.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "pool_target.py")), args...)
}

// TestRecordSetPoolSpawn: record -- python3 pool_target.py follows the
// pool's workers (forked, start method fork) from their first instruction.
func TestRecordSetPoolSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	for _, label := range []string{"pyenv-3.11", "pyenv-3.13"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			dir := t.TempDir()
			truth, out := filepath.Join(dir, "truth"), filepath.Join(dir, "p.folded")
			cmd := exec.Command(testutil.Binary(t), append([]string{"record", "-F", strconv.Itoa(setFreq), "--format", "folded", "-o", out, "--"},
				poolArgv(py, truth, "fork", "1.0", "stdin")...)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			in, _ := cmd.StdinPipe()
			so, _ := cmd.StdoutPipe() // -o FILE: the program keeps pyobs's stdout
			var se strings.Builder
			cmd.Stderr = &se
			// The program and its workers keep pyobs's stderr open if a
			// failure kills pyobs alone: Wait stops waiting for it.
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := readLines(so)
			lines.expect(t, "POOL")
			testutil.WaitBPFLink(t, cmd.Process.Pid, 30*time.Second)
			time.Sleep(100 * time.Millisecond) // the seeds go in right after the links
			fmt.Fprintln(in, "go")
			runUntil(t, cmd, &se)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			tr := readPoolTruth(t, truth)
			checkPool(t, label, tr, string(b))
			if !strings.Contains(se.String(), "pyobs record: processes: ") || !strings.Contains(se.String(), fmt.Sprintf("pid %d (", firstKey(tr.workers))) {
				t.Errorf("no account of the set in the footer:\n%s", se.String())
			}
		})
	}
}

// attachToPool starts a pool target (argv) that waits on stdin after
// printing POOL, attaches `pyobs ARGS -p ITS_PID` once its workers run,
// lets the pool go once the programs are linked, and waits for pyobs to
// end; it returns pyobs's stderr.
func attachToPool(t *testing.T, argv []string, args ...string) string {
	t.Helper()
	tg := exec.Command(argv[0], argv[1:]...)
	tg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tg.Stderr = os.Stderr
	in, _ := tg.StdinPipe()
	so, _ := tg.StdoutPipe()
	if err := tg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.Process.Kill(); _ = tg.Wait() })
	readLines(so).expect(t, "POOL")
	cmd := exec.Command(testutil.Binary(t), append(args, "-p", strconv.Itoa(tg.Process.Pid))...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var se strings.Builder
	cmd.Stderr = &se
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.WaitBPFLink(t, cmd.Process.Pid, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // the seeds and the existing children go in right after the links
	fmt.Fprintln(in, "go")
	runUntil(t, cmd, &se)
	return se.String()
}

// runUntil waits for cmd (pyobs) and fails the test on an error or after
// 90 s.
func runUntil(t *testing.T, cmd *exec.Cmd, se *strings.Builder) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pyobs: %v\n%s", err, se.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("pyobs did not end\n%s", se.String())
	}
}

func firstKey[V any](m map[int]V) int {
	for k := range m {
		return k
	}
	return 0
}

// TestRecordSetAttachChildren: -p PARENT --children after the pool
// started: the existing workers join at the start.
func TestRecordSetAttachChildren(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	py := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	truth, out := filepath.Join(dir, "truth"), filepath.Join(dir, "p.folded")
	attachToPool(t, poolArgv(py, truth, "fork", "1.0", "stdin"),
		"record", "--children", "-F", strconv.Itoa(setFreq), "--format", "folded", "-o", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkPool(t, "-p PARENT --children", readPoolTruth(t, truth), string(b))
}

// TestRecordSetExecedWorkers: workers started by the spawn method exec
// a new interpreter (pyenv's libpython at other addresses: ASLR): walked
// with their own addresses, and the account says how each joined. Their
// exec wakes pyobs (procset's OnChange), which reads each one's
// addresses while it starts: few of its samples fail the walk's checks
// (with a 200 ms look, 7-20 of ~100 did), with two CPU hogs beside.
func TestRecordSetExecedWorkers(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	py := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	truth := filepath.Join(dir, "truth")
	r := testutil.Run(t, 90*time.Second, append([]string{"record", "-F", strconv.Itoa(setFreq), "--format", "folded", "-o", filepath.Join(dir, "p.folded"), "--"},
		poolArgv(py, truth, "spawn", "0.5", "none")...)...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	tr := readPoolTruth(t, truth)
	b, err := os.ReadFile(filepath.Join(dir, "p.folded"))
	if err != nil {
		t.Fatal(err)
	}
	per := perProcess(t, string(b), "burn")
	var inBurn int64
	var wantAll float64
	for pid := range tr.workers {
		// Sampled from its exec: its interpreter's start-up (importlib,
		// spawn_main; more CPU under the hogs, and not in the truth)
		// comes first, walked with the target's addresses until its own
		// are read ([invalid frame chain]) or its code objects freed
		// before they were named ([unreadable]) — at most a third. Its
		// samples in burn: about its own CPU seconds in burn × F. Ticks
		// of per-CPU clocks land on it as the scheduler shares the CPUs
		// with the hogs (σ ≈ 7 of 100 here), so each worker is held to
		// ≥ 60 % and the three together to ±15 %.
		p := per[pid]
		want := tr.workers[pid][0] * setFreq
		inBurn += p.inFn
		wantAll += want
		t.Logf("worker %d (spawned): %+v, burn CPU %.3f s (%.0f samples at %d Hz)", pid, p, tr.workers[pid][0], want, setFreq)
		if float64(p.inFn) < 0.6*want || float64(p.marked) > float64(p.all)/3 {
			t.Errorf("worker %d (spawned): %+v, want about %.0f samples in burn, at most a third of its samples marked", pid, p, want)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, fmt.Sprintf("[pid %d] ", pid)) && !strings.Contains(l, ";burn (") {
					t.Logf("  not in burn: %s", l)
				}
			}
		}
		invalid := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("[pid %d] ", pid)) && strings.Contains(l, ";[invalid frame chain] ") {
				n, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
				invalid += n
			}
		}
		if invalid > 4 {
			t.Errorf("worker %d (spawned): %d samples [invalid frame chain]: its addresses were read late", pid, invalid)
		}
	}
	if d := float64(inBurn)/wantAll - 1; d < -0.15 || d > 0.15 {
		t.Errorf("the spawned workers: %d samples in burn, want their burn CPU × F = %.0f ± 15 %% (%+.1f %%)", inBurn, wantAll, 100*d)
	}
	if !strings.Contains(r.Stderr, " 0 refused") {
		t.Errorf("a spawned worker refused: %s", r.Stderr)
	}
}

// TestRecordSetCgroup: --cgroup on a cgroup v2 holding two Python
// processes made here: both in the stacks.
func TestRecordSetCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	dir := makeV2Cgroup(t)
	pys := []testutil.Interp{testutil.Find(t, "pyenv-3.12"), testutil.Find(t, "pyenv-3.12"), testutil.Find(t, "pyenv-3.11")}
	var pids []int
	for i, fn := range []string{"spin_one", "spin_two", "spin_other"} {
		pids = append(pids, startInCgroup(t, dir, pys[i], fmt.Sprintf("import sys, time\ndef %s():\n    x = 0\n    while True:\n        x += 1\nprint('READY', flush=True)\nsys.stdin.readline()\n%s()\n", fn, fn)))
	}
	r := testutil.Run(t, 60*time.Second, "record", "--cgroup", dir, "-d", "2s", "--format", "folded")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	per := perProcess(t, r.Stdout, "")
	for i, fn := range []string{"spin_one", "spin_two"} {
		if !strings.Contains(r.Stdout, fmt.Sprintf("[pid %d]", pids[i])) || !strings.Contains(r.Stdout, ";"+fn+" (") {
			t.Errorf("process %d (%s) not in the stacks: %+v\n%s", pids[i], fn, per, r.Stdout)
		}
	}
	// Another version: refused, counted, its samples under the reason.
	if strings.Contains(r.Stdout, "spin_other (") || !strings.Contains(r.Stdout, fmt.Sprintf("[pid %d]", pids[2])) {
		t.Errorf("the 3.11 process walked, or its samples missing:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "processes: 3 seen") || !strings.Contains(r.Stderr, "1 refused") ||
		!strings.Contains(r.Stderr, "refused: CPython 3.11.7 build differs from the target's 3.12.1") {
		t.Errorf("the footer's account: %s", r.Stderr)
	}
}

// TestRecordSetProgramStdout: the program's and its workers' stdout never
// in the profile, in every text format (to stderr instead).
func TestRecordSetProgramStdout(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	for _, f := range flame.Formats() {
		if flame.Binary(f) {
			continue // needs -o FILE: pyobs's stdout is then the program's
		}
		truth := filepath.Join(t.TempDir(), "truth")
		r := testutil.Run(t, 60*time.Second, append([]string{"record", "-F", strconv.Itoa(setFreq), "--format", f, "--"},
			poolArgv(py, truth, "fork", "0.2", "none")...)...)
		if r.Code != 0 {
			t.Errorf("%s: exit %d: %s", f, r.Code, r.Stderr)
			continue
		}
		for _, m := range []string{"POOL", "HELLO FROM WORKER"} {
			if strings.Contains(r.Stdout, m) {
				t.Errorf("--format %s: the program's %q in pyobs's output", f, m)
			}
			if !strings.Contains(r.Stderr, m) {
				t.Errorf("--format %s: the program's %q not on stderr", f, m)
			}
		}
		tr := readPoolTruth(t, truth)
		if f == "folded" && !strings.Contains(r.Stdout, fmt.Sprintf("[pid %d]", firstKey(tr.workers))) {
			t.Errorf("--format %s: a worker's process frame missing", f)
		}
		if f == "json" {
			var doc struct {
				Processes []struct {
					Pid int    `json:"pid"`
					How string `json:"how"`
				} `json:"processes"`
				Counts struct {
					Seen int `json:"seen"`
					Late int `json:"joined_late"`
				} `json:"process_counts"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Counts.Seen < 4 || len(doc.Processes) != doc.Counts.Seen {
				t.Errorf("json account: %+v", doc)
			}
		}
	}
}

// TestRecordSetNeedsBPF: the engines that read one process from user
// space refuse an explicit set in one line.
func TestRecordSetNeedsBPF(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c", "import time\nprint('READY', flush=True)\ntime.sleep(60)\n"), 30*time.Second)
	for _, args := range [][]string{{"--mode", "wall"}, {"--engine", "perf"}, {"--native"}} {
		r := testutil.Run(t, 30*time.Second, append(append([]string{"record", "-p", strconv.Itoa(tg.Pid), "--children", "-d", "1s"}, args...), "--format", "folded")...)
		msg := strings.TrimSpace(r.Stderr)
		if r.Code == 0 || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "bpf engine") {
			t.Errorf("%v: exit %d, stderr %q: want one line refusing the set", args, r.Code, msg)
		}
	}
}
