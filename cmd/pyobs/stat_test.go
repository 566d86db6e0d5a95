package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/testutil"
)

func statJSON(t *testing.T, args ...string) (*report.Stat, testutil.Result) {
	t.Helper()
	r := testutil.Run(t, 30*time.Second, append([]string{"stat", "--format", "json"}, args...)...)
	var st report.Stat
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("pyobs stat %v: exit %d, not JSON: %v\nstdout: %s\nstderr: %s", args, r.Code, err, r.Stdout, r.Stderr)
	}
	return &st, r
}

func hasVerdict(st *report.Stat, v string) bool {
	for _, x := range st.Verdicts {
		if x == v {
			return true
		}
	}
	return false
}

func counter(st *report.Stat, ev string) report.Counter {
	for _, c := range st.Counters {
		if c.Event == ev {
			return c
		}
	}
	return report.Counter{}
}

// latestTruth drains the target's "T mono process_time burner_thread_time" lines.
func latestTruth(t *testing.T, tg *testutil.Target) (mono, cpu float64) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-tg.Lines:
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "T" {
				mono, _ = strconv.ParseFloat(f[1], 64)
				cpu, _ = strconv.ParseFloat(f[2], 64)
				if len(tg.Lines) == 0 {
					return
				}
			}
		case <-deadline:
			t.Fatal("the target stopped reporting its CPU time")
		}
	}
}

// TestStatSpinning: a Python thread spinning → on-cpu at ~1 core, agreeing
// with the CPU time the target measured itself (process_time over the same
// span) within 20 %; task-clock is counted and agrees; hardware events are
// counted or "not supported", never an error; the Python thread name shows.
func TestStatSpinning(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t) // build first: the truth must span the run only
	tg := testutil.Start(t, in, "cpu_burn.py")
	time.Sleep(100 * time.Millisecond)
	m0, c0 := latestTruth(t, tg)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	m1, c1 := latestTruth(t, tg)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	truth := (c1 - c0) / (m1 - m0)
	t.Logf("pyobs: %.3f cores over %.3f s (user %.2f, sys %.2f); target itself: %.3f cores over %.3f s; task-clock %.3f CPUs",
		st.CPU.Utilization, st.WindowS, st.CPU.UserS, st.CPU.SystemS, truth, m1-m0, deref(st.Ratios.CPUsUtilized))
	if u := st.CPU.Utilization; truth >= 0.8 && (u < 0.8 || u > 1.1) {
		t.Errorf("utilization %.3f cores, want 0.8..1.1", u)
	} else if truth < 0.8 {
		t.Logf("the machine is busy: the target itself got only %.2f cores, so 0.8..1.1 is not checked", truth)
	}
	if math.Abs(st.CPU.Utilization-truth)/truth > 0.2 {
		t.Errorf("utilization %.3f vs the target's own %.3f: more than 20 %% apart", st.CPU.Utilization, truth)
	}
	if !hasVerdict(st, "on-cpu") || hasVerdict(st, "off-cpu") {
		t.Errorf("verdicts %v, want on-cpu", st.Verdicts)
	}
	tc := counter(st, "task-clock")
	if !tc.Supported || tc.Value == nil {
		t.Fatalf("task-clock: %+v", tc)
	}
	if tcs := *tc.Value / 1e9 / st.WindowS; math.Abs(tcs-truth)/truth > 0.2 {
		t.Errorf("task-clock %.3f CPUs vs the target's own %.3f", tcs, truth)
	}
	for _, ev := range []string{"context-switches", "cpu-migrations", "page-faults"} {
		if c := counter(st, ev); !c.Supported || c.Value == nil {
			t.Errorf("%s: %+v", ev, c)
		}
	}
	for _, ev := range []string{"cycles", "instructions", "cache-misses", "branch-misses"} {
		c := counter(st, ev)
		if c.Event == "" {
			t.Errorf("%s missing from the counters", ev)
		}
		if !c.Supported && (c.Value != nil || !strings.Contains(c.Note, "not supported")) {
			t.Errorf("%s unsupported but value %v note %q", ev, c.Value, c.Note)
		}
	}
	named := false
	for _, th := range st.Threads {
		if th.PythonName == "burner" {
			named = true
			if th.Utilization < 0.7*truth {
				t.Errorf("burner thread at %.2f cores", th.Utilization)
			}
		}
	}
	if !named {
		t.Errorf("no thread named burner: %+v", st.Threads)
	}
	if st.Memory.PSSBytes == nil || st.Memory.RSSBytes == 0 || st.IO.FDLimit == 0 || st.Cgroup.Version == 0 {
		t.Errorf("memory %+v io %+v cgroup %+v", st.Memory, st.IO, st.Cgroup)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestStatSleeper: short naps → off-cpu, voluntary ≫ nonvoluntary, blocking.
func TestStatSleeper(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "sleeper.py")
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	t.Logf("utilization %.4f, voluntary %d, nonvoluntary %d, verdicts %v", st.CPU.Utilization, st.Sched.Voluntary, st.Sched.Nonvoluntary, st.Verdicts)
	if !hasVerdict(st, "off-cpu") || hasVerdict(st, "on-cpu") {
		t.Errorf("verdicts %v, want off-cpu", st.Verdicts)
	}
	if st.Sched.Voluntary < 50 || st.Sched.Voluntary < 4*st.Sched.Nonvoluntary {
		t.Errorf("voluntary %d, nonvoluntary %d: want voluntary ≫ nonvoluntary", st.Sched.Voluntary, st.Sched.Nonvoluntary)
	}
	if !hasVerdict(st, "blocking") {
		t.Errorf("verdicts %v, want blocking", st.Verdicts)
	}
}

// TestStatNonPython: stat works on any process, and says names are comm.
func TestStatNonPython(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.StartArgv(t, []string{"sh", "-c", "echo READY; exec sleep 60"}, 10*time.Second)
	time.Sleep(50 * time.Millisecond)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "300ms")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if st.Comm != "sleep" || !hasVerdict(st, "off-cpu") || len(st.Threads) != 1 {
		t.Errorf("comm %q verdicts %v threads %d", st.Comm, st.Verdicts, len(st.Threads))
	}
	if !strings.Contains(strings.Join(st.Notes, " "), "frame walker is not available") {
		t.Errorf("notes %v", st.Notes)
	}
}

// TestStatThrottledCgroup: a burner in a cgroup with a 20 % quota →
// cpu-throttled, nr_throttled > 0, utilization near 0.2.
func TestStatThrottledCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	dir, procs := makeQuotaCgroup(t)
	tg := testutil.Start(t, in, "cpu_burn.py")
	if err := os.WriteFile(procs, []byte(fmt.Sprint(tg.Pid)), 0); err != nil {
		t.Fatalf("can't move pid %d into %s: %v", tg.Pid, dir, err)
	}
	time.Sleep(300 * time.Millisecond)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	t.Logf("cgroup %+v, utilization %.3f, verdicts %v", st.Cgroup, st.CPU.Utilization, st.Verdicts)
	if !hasVerdict(st, "cpu-throttled") || st.Cgroup.NrThrottled == 0 {
		t.Errorf("verdicts %v nr_throttled %d: want cpu-throttled", st.Verdicts, st.Cgroup.NrThrottled)
	}
	if st.Cgroup.QuotaCores == nil || math.Abs(*st.Cgroup.QuotaCores-0.2) > 1e-9 {
		t.Errorf("quota %v, want 0.2 cores", st.Cgroup.QuotaCores)
	}
	if st.Cgroup.ThrottledS <= 0 || st.CPU.Utilization > 0.3 {
		t.Errorf("throttled %.3f s, utilization %.3f (quota 0.2)", st.Cgroup.ThrottledS, st.CPU.Utilization)
	}
}

// makeQuotaCgroup creates a cgroup with a 20 ms / 100 ms CPU quota, v1 where
// the cpu controller is on v1, else v2, and removes it at cleanup.
func makeQuotaCgroup(t *testing.T) (dir, procs string) {
	t.Helper()
	name := fmt.Sprintf("pyobs-test-%d", os.Getpid())
	for _, root := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"} {
		if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		dir = filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			testutil.Skip(t, fmt.Sprintf("can't create a v1 cpu cgroup: %v", err))
		}
		cleanupCgroup(t, dir, filepath.Join(root, "cgroup.procs"))
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000"), 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("20000"), 0); err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, "cgroup.procs")
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if err != nil || !strings.Contains(" "+string(b)+" ", " cpu") {
			continue
		}
		dir = filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			testutil.Skip(t, fmt.Sprintf("can't create a v2 cgroup: %v", err))
		}
		cleanupCgroup(t, dir, filepath.Join(root, "cgroup.procs"))
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("20000 100000"), 0); err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, "cgroup.procs")
	}
	testutil.Skip(t, "no cgroup with the cpu controller (v1 cpu.cfs_quota_us or v2 cpu in subtree_control)")
	return "", ""
}

func cleanupCgroup(t *testing.T, dir, parentProcs string) {
	t.Cleanup(func() {
		// Move whatever is left back to the parent, then remove it.
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(b)) {
				_ = os.WriteFile(parentProcs, []byte(p), 0)
			}
		}
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("can't remove cgroup %s", dir)
	})
}

// TestStatContention: two burners pinned to one CPU → the run queue and
// involuntary switches say so.
func TestStatContention(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "cpu_burn.py", "--cpu", "0")
	testutil.Start(t, in, "cpu_burn.py", "--cpu", "0")
	time.Sleep(200 * time.Millisecond)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	t.Logf("utilization %.3f, run-queue wait %.3f s (share %.2f), switches vol %d nonvol %d, verdicts %v",
		st.CPU.Utilization, st.Sched.RunqueueWaitS, st.Sched.RunqueueShare, st.Sched.Voluntary, st.Sched.Nonvoluntary, st.Verdicts)
	if !hasVerdict(st, "runqueue-saturated") && !hasVerdict(st, "cpu-contention") {
		t.Errorf("verdicts %v: want runqueue-saturated or cpu-contention", st.Verdicts)
	}
	if st.Sched.RunqueueWaitS < 0.2 {
		t.Errorf("run-queue wait %.3f s for two burners on one CPU", st.Sched.RunqueueWaitS)
	}
}

// TestStatIOCounters: fsync'ed writes move write_bytes (block layer) and wchar.
func TestStatIOCounters(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	tg := testutil.Start(t, in, "io_heavy.py", dir)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "500ms")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	t.Logf("io %+v", st.IO)
	if !st.IO.Available || st.IO.WcharBytes < 256*1024 || st.IO.WriteBytes == 0 || st.IO.WriteSyscalls == 0 {
		t.Errorf("io counters did not move: %+v (is %s on a block device?)", st.IO, dir)
	}
}

// TestStatSpawn: -- CMD: whole-run counters, the command's exit status.
func TestStatSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "cpu_burn.py"), "--cpu-seconds", "0.6", "--exit", "3")
	out := filepath.Join(t.TempDir(), "st.json")
	r := testutil.Run(t, 30*time.Second, append([]string{"stat", "--format", "json", "-o", out, "--"}, argv...)...)
	if r.Code != 3 {
		t.Fatalf("exit %d, want the command's 3; stderr: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var st report.Stat
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("run %.2f s, user %.2f s, utilization %.2f, verdicts %v, task-clock %.3f s", st.WindowS, st.CPU.UserS, st.CPU.Utilization, st.Verdicts, deref(counter(&st, "task-clock").Value)/1e9)
	if st.Mode != "run" || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("mode %q exit %v", st.Mode, st.ExitCode)
	}
	if st.CPU.UserS+st.CPU.SystemS < 0.5 {
		t.Errorf("whole-run CPU %.2f s for a burn of 0.6 CPU-seconds", st.CPU.UserS+st.CPU.SystemS)
	}
	if tc := counter(&st, "task-clock"); tc.Value == nil || *tc.Value/1e9 < 0.5 {
		t.Errorf("task-clock %+v", tc)
	}
}

// TestStatPidGone: the target exits mid-window → what was measured, a note.
func TestStatPidGone(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "sleeper.py", "--exit-after", "0.4")
	go func() { _, _ = tg.Cmd.Process.Wait() }() // reap it, so it is gone, not a zombie
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "2s")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if st.Complete || st.WindowS >= 2 || !strings.Contains(strings.Join(st.Notes, " "), "exited during the window") {
		t.Errorf("complete %v window %.2f notes %v", st.Complete, st.WindowS, st.Notes)
	}
	if st.Sched.Voluntary == 0 {
		t.Errorf("nothing measured before the exit: %+v", st.Sched)
	}
	r = testutil.Run(t, 10*time.Second, "stat", "-p", fmt.Sprint(tg.Pid))
	if r.Code != exitNoTarget {
		t.Errorf("stat on a gone pid: exit %d, want %d (%s)", r.Code, exitNoTarget, r.Stderr)
	}
}

// TestStatInterval: -i to a pipe → one JSON line per interval.
func TestStatInterval(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.StartArgv(t, []string{"sh", "-c", "echo READY; exec sleep 60"}, 10*time.Second)
	cmd := exec.Command(testutil.Binary(t), "stat", "-p", fmt.Sprint(tg.Pid), "-i", "200ms", "-d", "1s")
	r := testutil.RunCmd(t, 20*time.Second, cmd)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	n := 0
	for sc.Scan() {
		var st report.Stat
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("line %d is not JSON: %v: %q", n+1, err, sc.Text())
		}
		if st.Mode != "interval" || st.WindowS < 0.1 || st.WindowS > 0.4 {
			t.Errorf("line %d: mode %q window %.3f", n+1, st.Mode, st.WindowS)
		}
		n++
	}
	if n < 4 || n > 6 {
		t.Errorf("%d lines for -i 200ms -d 1s", n)
	}
}

func TestStatUsage(t *testing.T) {
	for _, args := range [][]string{{"stat", "-p", "1", "--format", "svg"}, {"stat"}, {"stat", "-p", "1", "-d", "0s"}} {
		if r := testutil.Run(t, 10*time.Second, args...); r.Code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, r.Code, exitUsage, r.Stderr)
		}
	}
}

// TestStatPerfDenied: run as an unprivileged user against a root process,
// perf_event_open is refused; stat still reports what procfs gives and its
// note names the gate (perf_event_paranoid, CAP_PERFMON) and the fix.
func TestStatPerfDenied(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c", "import time\nprint('READY', flush=True)\ntime.sleep(60)"), 20*time.Second)
	cmd := exec.Command(testutil.Binary(t), "stat", "-p", fmt.Sprint(tg.Pid), "-d", "200ms", "--format", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	r := testutil.RunCmd(t, 30*time.Second, cmd)
	if r.Code != 0 {
		t.Fatalf("stat as nobody: exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "perf_event_paranoid") || !strings.Contains(r.Stdout, "CAP_PERFMON") {
		t.Errorf("the report does not name the perf gate:\n%.2000s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, `"utilization"`) {
		t.Errorf("the procfs part is missing:\n%.1000s", r.Stdout)
	}
}

// TestStatShortThreadsSched: a thread-per-task process (each thread lives
// ~0.1–0.3 s) pinned with a competitor on one CPU, polled every 20 ms.
// Threads that exited in the window are in the schedstat sums to their
// last poll, and what no
// poll saw is reported apart (unseen_cpu_s): together they hold the
// process's CPU, and the queue for the CPU is judged. Before, only the
// threads alive at both ends were summed (0.1 s of 1.7 s of CPU) and no
// run-queue verdict fired.
func TestStatShortThreadsSched(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	comp := exec.Command(py.Argv[0], append(py.Argv[1:], "-c", "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass")...)
	if err := comp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = comp.Process.Kill(); _ = comp.Wait() })
	tg := testutil.Start(t, py, "thread_per_task.py")
	time.Sleep(300 * time.Millisecond)
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "3s", "--poll", "20ms")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	cpu := st.CPU.UserS + st.CPU.SystemS
	t.Logf("cpu %.3f s; schedstat on-CPU %.3f s, run-queue wait %.3f s (share %.2f); %d exited threads, unseen %.3f s; verdicts %v",
		cpu, st.Sched.OnCPUS, st.Sched.RunqueueWaitS, st.Sched.RunqueueShare, st.Sched.ExitedThreads, st.Sched.UnseenCPUS, st.Verdicts)
	if st.Sched.ExitedThreads < 3 {
		t.Errorf("%d exited threads counted: the target ran a new thread every ~0.2 s", st.Sched.ExitedThreads)
	}
	if got := st.Sched.OnCPUS + st.Sched.UnseenCPUS; got < 0.85*cpu || got > 1.15*cpu+0.05 {
		t.Errorf("schedstat on-CPU %.3f s + unseen %.3f s: want the process's %.3f s of CPU", st.Sched.OnCPUS, st.Sched.UnseenCPUS, cpu)
	}
	if st.Sched.OnCPUS < 0.5*cpu {
		t.Errorf("schedstat on-CPU %.3f s of the process's %.3f s: the exited threads are missing", st.Sched.OnCPUS, cpu)
	}
	if !hasVerdict(st, "runqueue-saturated") {
		t.Errorf("verdicts %v: want runqueue-saturated (pinned beside a competitor)", st.Verdicts)
	}
}
