package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
	"github.com/pyobs/pyobs/internal/trace"
)

type traceOut struct {
	Engine      string `json:"engine"`
	EngineNote  string `json:"engine_note"`
	SiteReads   uint64 `json:"site_reads"`
	SiteKernel  uint64 `json:"site_reads_in_kernel"`
	SiteLate    uint64 `json:"site_reads_late"`
	Threads     int    `json:"threads"`
	KernelDrops *struct {
		Events, Histogram, Errnos, Enters uint64
	} `json:"kernel_drops"`
	Events         uint64  `json:"events"`
	Lost           uint64  `json:"lost"`
	TargetStoppedS float64 `json:"target_stopped_s"`
	Slowdown       string  `json:"slowdown_class"`
	TargetExited   bool    `json:"target_exited"`
	SiteFailed     uint64  `json:"site_reads_failed"`
	SiteError      string  `json:"site_read_error"`
	ExitCode       *int    `json:"exit_code"`
	Syscalls       []struct {
		Name         string            `json:"name"`
		Calls        uint64            `json:"calls"`
		Errors       uint64            `json:"errors"`
		P50US        float64           `json:"p50_us"`
		Errnos       map[string]uint64 `json:"errnos"`
		Unattributed uint64            `json:"unattributed"`
		LateReads    uint64            `json:"late_reads"`
		TopSites     []struct {
			Function string `json:"function"`
			File     string `json:"file"`
			Line     int    `json:"line"`
			Calls    uint64 `json:"calls"`
		} `json:"top_sites"`
	} `json:"syscalls"`
}

// markerLine finds the line of a "# MARK" comment in a target script.
func markerLine(t *testing.T, script, mark string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.Repo(), "testdata", "targets", script))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "# "+mark) {
			return i + 1
		}
	}
	t.Fatalf("no %s in %s", mark, script)
	return 0
}

func readTraceJSON(t *testing.T, path string) traceOut {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out traceOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, b)
	}
	return out
}

// checkStatAndSleep checks the ground truth of trace_stat.py run with n stats and m sleeps of 50 ms.
func checkStatAndSleep(t *testing.T, out traceOut, engine string, n, m uint64) {
	t.Helper()
	statLine := markerLine(t, "trace_stat.py", "STAT_LINE")
	sleepLine := markerLine(t, "trace_stat.py", "SLEEP_LINE")
	slowdown := map[string]string{"ptrace": trace.PtraceSlowdown, "tracepoint": trace.TracepointSlowdown}[engine]
	if out.Engine != engine || out.Lost != 0 || out.Slowdown != slowdown || out.Events == 0 {
		t.Errorf("footer fields: %+v", out)
	}
	var sawStat, sawSleep bool
	for _, s := range out.Syscalls {
		switch s.Name {
		case "newfstatat", "stat", "statx", "lstat", "fstatat64":
			if s.Errnos["ENOENT"] < n {
				continue // another stat-family call the libc did not use for os.stat
			}
			sawStat = true
			if s.Calls < n || len(s.TopSites) == 0 {
				t.Errorf("%s: %d calls, sites %+v; want ≥ %d with a site (site reads failed %d: %s)", s.Name, s.Calls, s.TopSites, n, out.SiteFailed, out.SiteError)
				continue
			}
			top := s.TopSites[0]
			if top.Function != "do_stats" || top.Line != statLine || !strings.HasSuffix(top.File, "trace_stat.py") || top.Calls < n {
				t.Errorf("%s top site %+v, want do_stats at trace_stat.py:%d with ≥ %d calls", s.Name, top, statLine, n)
			}
		case "clock_nanosleep", "nanosleep":
			sawSleep = true
			if s.Calls < m {
				t.Errorf("%s: %d calls, want ≥ %d", s.Name, s.Calls, m)
			}
			if s.P50US < 45_000 || s.P50US > 80_000 {
				t.Errorf("%s p50 %.0f µs, want ≈ 50 ms", s.Name, s.P50US)
			}
			if len(s.TopSites) == 0 || s.TopSites[0].Function != "nap" || s.TopSites[0].Line != sleepLine || s.TopSites[0].Calls < m {
				t.Errorf("%s top sites %+v, want nap at line %d with ≥ %d calls (site reads failed %d: %s)", s.Name, s.TopSites, sleepLine, m, out.SiteFailed, out.SiteError)
			}
		}
	}
	if !sawStat || !sawSleep {
		t.Errorf("missing the stat family with %d ENOENT (%v) or the sleep (%v): %+v", n, sawStat, sawSleep, out.Syscalls)
	}
}

func TestTraceSpawnCountsSitesAndStatus(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	bin := testutil.Binary(t)
	o := filepath.Join(t.TempDir(), "t.json")
	argv := append([]string{"trace", "--engine", "ptrace", "--format", "json", "-o", o, "--"}, py.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_stat.py"), "--stats", "300", "--sleeps", "10", "--exit", "7")
	r := testutil.RunCmd(t, 30*time.Second, exec.Command(bin, argv...))
	if r.Code != 7 {
		t.Fatalf("exit %d, want the target's 7\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "DONE stats=300 sleeps=10") {
		t.Fatalf("target did not report its work: %s", r.Stdout)
	}
	out := readTraceJSON(t, o)
	if !out.TargetExited || out.ExitCode == nil || *out.ExitCode != 7 {
		t.Errorf("exit not recorded: exited %v code %v", out.TargetExited, out.ExitCode)
	}
	checkStatAndSleep(t, out, "ptrace", 300, 10)
}

func TestTraceAttachSites(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			tg := testutil.Start(t, py, "trace_stat.py", "--stats", "200", "--sleeps", "10", "--delay", "1.5")
			o := filepath.Join(t.TempDir(), "t.json")
			r := testutil.Run(t, 30*time.Second, "trace", "--engine", "ptrace", "-p", strconv.Itoa(tg.Pid), "-d", "20s", "--format", "json", "-o", o)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, "target exited") || !strings.Contains(r.Stderr, "engine ptrace;") {
				t.Errorf("footer: %s", r.Stderr)
			}
			out := readTraceJSON(t, o)
			checkStatAndSleep(t, out, "ptrace", 200, 10)
		})
	}
}

var statusRe = regexp.MustCompile(`STATUS reads=(\d+) sleeps=(\d+) eintr=(\d+)`)

func lastStatus(t *testing.T, tg *testutil.Target, wait time.Duration) (reads, sleeps, eintr int) {
	t.Helper()
	deadline := time.After(wait)
	got := false
	for {
		select {
		case l := <-tg.Lines:
			if m := statusRe.FindStringSubmatch(l); m != nil {
				reads, _ = strconv.Atoi(m[1])
				sleeps, _ = strconv.Atoi(m[2])
				eintr, _ = strconv.Atoi(m[3])
				got = true
			}
		case <-deadline:
			if !got {
				t.Fatal("no STATUS line from the target")
			}
			return
		}
	}
}

func checkUntraced(t *testing.T, pid int) {
	t.Helper()
	st := testutil.ProcStatus(pid)
	if st == nil {
		t.Fatalf("target %d is gone", pid)
	}
	if st["TracerPid"] != "0" || strings.HasPrefix(st["State"], "t") || strings.HasPrefix(st["State"], "T") {
		t.Fatalf("target left traced or stopped: TracerPid %s State %s", st["TracerPid"], st["State"])
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/status")
		if strings.Contains(string(b), "\nState:\tt") || !strings.Contains(string(b), "\nTracerPid:\t0\n") {
			t.Fatalf("thread %s left traced or stopped:\n%s", e.Name(), b)
		}
	}
}

func TestTraceDetachNoEINTR(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, py, "trace_eintr.py", "--run", "60")
	bin := testutil.Binary(t)
	r0, s0, _ := lastStatus(t, tg, 300*time.Millisecond)
	for i := 0; i < 10; i++ {
		r := testutil.Run(t, 10*time.Second, "trace", "--engine", "ptrace", "-p", strconv.Itoa(tg.Pid), "-d", "150ms", "--format", "json", "-o", filepath.Join(t.TempDir(), "x.json"))
		if r.Code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, r.Code, r.Stderr)
		}
		checkUntraced(t, tg.Pid)
	}
	// SIGINT or SIGTERM mid-trace: the output is still written, the target let go.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		o := filepath.Join(t.TempDir(), "int.txt")
		cmd := exec.Command(bin, "trace", "--engine", "ptrace", "-p", strconv.Itoa(tg.Pid), "--log", "-o", o)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		_ = cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("pyobs after %v: %v\n%s", sig, err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("pyobs did not end after %v: %s", sig, stderr.String())
		}
		b, _ := os.ReadFile(o)
		if !strings.Contains(string(b), "read(") || !strings.Contains(string(b), "pyobs trace: pid") {
			t.Errorf("log after %v lacks calls or summary:\n%s", sig, b)
		}
		checkUntraced(t, tg.Pid)
	}
	// SIGKILL mid-trace: the kernel detaches.
	k := exec.Command(bin, "trace", "--engine", "ptrace", "-p", strconv.Itoa(tg.Pid))
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = k.Process.Kill()
	_ = k.Wait()
	time.Sleep(50 * time.Millisecond)
	checkUntraced(t, tg.Pid)
	r1, s1, eintr := lastStatus(t, tg, 400*time.Millisecond)
	if eintr != 0 {
		t.Errorf("the target saw EINTR %d times", eintr)
	}
	if r1 <= r0 || s1 <= s0 {
		t.Errorf("target stopped working: reads %d→%d sleeps %d→%d", r0, r1, s0, s1)
	}
}

func TestTraceUsage(t *testing.T) {
	bin := testutil.Binary(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "--engine", "kernel", "-p", "1"}, "unknown --engine"},
		{[]string{"trace", "-e", "opnat", "-p", "1"}, "openat"},
		{[]string{"trace", "--format", "svg", "-p", "1"}, "unknown --format"},
		{[]string{"trace"}, "no target"},
	} {
		r := testutil.RunCmd(t, 10*time.Second, exec.Command(bin, c.args...))
		if r.Code != exitUsage || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.Code, r.Stderr, exitUsage, c.want)
		}
	}
}

// A target stopped by job control (SIGSTOP) while traced stays stopped when
// the trace ends (PTRACE_LISTEN, then detach), untraced, and runs on after SIGCONT.
func TestTraceGroupStop(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, py, "trace_eintr.py", "--run", "60")
	bin := testutil.Binary(t)
	cmd := exec.Command(bin, "trace", "--engine", "ptrace", "-p", strconv.Itoa(tg.Pid), "-d", "1s", "--format", "json", "-o", filepath.Join(t.TempDir(), "g.json"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = syscall.Kill(tg.Pid, syscall.SIGSTOP)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pyobs: %v\n%s", err, stderr.String())
		}
	case <-time.After(8 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("pyobs did not end while the target was group-stopped: %s", stderr.String())
	}
	st := testutil.ProcStatus(tg.Pid)
	if st["TracerPid"] != "0" || !strings.HasPrefix(st["State"], "T") {
		t.Fatalf("want untraced and job-control stopped: TracerPid %s State %s", st["TracerPid"], st["State"])
	}
	_ = syscall.Kill(tg.Pid, syscall.SIGCONT)
	for len(tg.Lines) > 0 {
		<-tg.Lines
	}
	r0, _, _ := lastStatus(t, tg, 250*time.Millisecond)
	r1, _, eintr := lastStatus(t, tg, 300*time.Millisecond)
	checkUntraced(t, tg.Pid)
	if eintr != 0 || r1 <= r0 {
		t.Fatalf("after SIGCONT: eintr %d, reads %d→%d", eintr, r0, r1)
	}
}

// TestTraceOverhead measures the slowdown of a syscall-heavy loop (200k
// os.getpid()) under the ptrace engine; it only reports (PYOBS_BENCH=1).
func TestTraceOverhead(t *testing.T) {
	if os.Getenv("PYOBS_BENCH") != "1" {
		t.Skip("set PYOBS_BENCH=1 to measure the ptrace engine's slowdown")
	}
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	script := filepath.Join(testutil.Repo(), "testdata", "targets", "trace_getpid.py")
	elapsed := func(argv ...string) float64 {
		r := testutil.RunCmd(t, 120*time.Second, exec.Command(argv[0], argv[1:]...))
		m := regexp.MustCompile(`ELAPSED ([0-9.]+)`).FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Fatalf("%v: %s %s", argv, r.Stdout, r.Stderr)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	base := append(append([]string{}, py.Argv...), script, "200000")
	bare := elapsed(base...)
	traced := elapsed(append([]string{testutil.Binary(t), "trace", "-o", os.DevNull, "--"}, base...)...)
	t.Logf("200k os.getpid(): bare %.3fs, under pyobs trace (ptrace) %.3fs: %.0f× slower", bare, traced, traced/bare)
}

// TestTraceBadListFlags: a negative --sites, an empty name in -e's list
// and an empty -e (an unset shell variable) are usage errors (one line, status 2), not silently taken.
func TestTraceBadListFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sites", "-1"}, "--sites -1"},
		{[]string{"-e", "openat,,close"}, "empty syscall name"},
		{[]string{"-e", "openat,"}, "empty syscall name"},
		{[]string{"-e", ""}, "-e names no syscall"},
		{[]string{"-e", " "}, "-e names no syscall"},
	} {
		argv := append(append([]string{"trace", "-p", strconv.Itoa(os.Getpid())}, c.args...), "-d", "10ms")
		r := testutil.RunCmd(t, 30*time.Second, exec.Command(testutil.Binary(t), argv...))
		if r.Code != 2 || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2), stderr %q (want one line with %q)", c.args, r.Code, r.Stderr, c.want)
		}
	}
}
