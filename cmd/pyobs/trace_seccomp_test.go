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

	"github.com/pyobs/pyobs/internal/testutil"
	"github.com/pyobs/pyobs/internal/trace"
)

// TestTraceSpawnSeccomp: `pyobs trace -e … -- CMD` installs a seccomp
// filter in the command (through a re-exec of pyobs), so only the traced
// calls stop: every stop pyobs handled is one of them (events = the rows'
// calls), the counts and sites are exact, and the status is passed on.
func TestTraceSpawnSeccomp(t *testing.T) {
	testutil.RequireRoot(t)
	statLine := markerLine(t, "trace_stat.py", "STAT_LINE")
	sleepLine := markerLine(t, "trace_stat.py", "SLEEP_LINE")
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			o := filepath.Join(t.TempDir(), "s.json")
			argv := append([]string{"trace", "--engine", "ptrace", "-e", "newfstatat,clock_nanosleep", "--format", "json", "-o", o, "--"}, py.Argv...)
			argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_stat.py"), "--stats", "300", "--sleeps", "5", "--exit", "7")
			r := testutil.RunCmd(t, 30*time.Second, exec.Command(testutil.Binary(t), argv...))
			if r.Code != 7 || !strings.Contains(r.Stdout, "DONE stats=300 sleeps=5") {
				t.Fatalf("exit %d (want the target's 7)\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
			}
			if !strings.Contains(r.Stderr, "seccomp filter: untraced calls never stop") {
				t.Errorf("footer: %s", r.Stderr)
			}
			out := readTraceJSON(t, o)
			if out.Engine != "ptrace" || out.Slowdown != trace.SeccompSlowdown || out.ExitCode == nil || *out.ExitCode != 7 {
				t.Errorf("summary: %+v", out)
			}
			var calls uint64
			var sawStat, sawSleep bool
			for _, s := range out.Syscalls {
				calls += s.Calls
				switch s.Name {
				case "newfstatat":
					// The interpreter's start-up stats missing files too;
					// the 300 of do_stats are each at their line.
					sawStat = s.Errnos["ENOENT"] >= 300 && len(s.TopSites) > 0 && s.TopSites[0].Function == "do_stats" &&
						s.TopSites[0].Line == statLine && s.TopSites[0].Calls == 300
				case "clock_nanosleep":
					for _, site := range s.TopSites {
						if site.Function == "nap" && site.Line == sleepLine && site.Calls == 5 {
							sawSleep = true
						}
					}
				case "restart_syscall":
				default:
					t.Errorf("%s stopped although not in the filter (%d calls)", s.Name, s.Calls)
				}
			}
			var restarted struct {
				Restarted uint64 `json:"restarted_calls"`
			}
			readJSONInto(t, o, &restarted)
			if out.Events != calls+restarted.Restarted {
				t.Errorf("%d stops at a call exit, %d calls in the rows (+%d restarted): untraced calls stopped", out.Events, calls, restarted.Restarted)
			}
			if !sawStat || !sawSleep {
				t.Errorf("stat at do_stats:%d ×300 %v, sleep at nap:%d ×5 %v: %+v", statLine, sawStat, sleepLine, sawSleep, out.Syscalls)
			}
		})
	}
}

func readJSONInto(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestTraceSpawnSeccompEndsEarly: a filter cannot be removed and a filtered
// call without a tracer fails with ENOSYS, so when -d ends the trace first
// the command must still run to its end unharmed (every sleep done, its own
// status) while pyobs stops counting.
func TestTraceSpawnSeccompEndsEarly(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	argv := append([]string{"trace", "--engine", "ptrace", "-d", "200ms", "-e", "clock_nanosleep", "--format", "json", "-o", filepath.Join(t.TempDir(), "e.json"), "--"}, py.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_stat.py"), "--sleeps", "12", "--exit", "5")
	r := testutil.RunCmd(t, 30*time.Second, exec.Command(testutil.Binary(t), argv...))
	if r.Code != 5 || !strings.Contains(r.Stdout, "DONE stats=0 sleeps=12") {
		t.Fatalf("exit %d (want 5) — the command must finish its 12 sleeps after the trace ended\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestTracePtraceWindowOutlived: -d shorter than the program ends the
// trace, never the program: with and without a seccomp filter (-e) the
// command is not signalled (it says so itself) and exits by itself, pyobs
// passes its status on, the report covers the -d window, and the threads
// counted are the target's own (the task count it prints), not the
// re-exec'd seccomp helper's as well. Beside a CPU hog.
func TestTracePtraceWindowOutlived(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	py := testutil.Find(t, "pyenv-3.12")
	// 7 s: past the 5 s grace (and the 7 s SIGKILL) the old code gave a
	// command after the window.
	for _, filter := range []string{"", "newfstatat"} {
		t.Run("e="+filter, func(t *testing.T) {
			o := filepath.Join(t.TempDir(), "w.json")
			argv := []string{"trace", "--engine", "ptrace", "-d", "1s", "--format", "json", "-o", o}
			if filter != "" {
				argv = append(argv, "-e", filter)
			}
			argv = append(append(argv, "--"), py.Argv...)
			argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_outlive.py"), "7", "3")
			start := time.Now()
			r := testutil.RunCmd(t, 60*time.Second, exec.Command(testutil.Binary(t), argv...))
			took := time.Since(start)
			var own int
			for _, l := range strings.Split(r.Stdout, "\n") {
				if n, ok := strings.CutPrefix(l, "THREADS "); ok {
					own, _ = strconv.Atoi(n)
				}
			}
			var out struct {
				traceOut
				DurationS float64 `json:"duration_s"`
			}
			readJSONInto(t, o, &out)
			if out.DurationS < 0.95 || out.DurationS > 1.5 {
				t.Errorf("report covers %.2fs, want the 1s window", out.DurationS)
			}
			if own != 3 || out.Threads != own {
				t.Errorf("%d threads counted, the target has %d (stdout %s)", out.Threads, own, r.Stdout)
			}
			if len(out.Syscalls) == 0 {
				t.Errorf("no calls in the window")
			}
			if r.Code != 7 || !strings.Contains(r.Stdout, "EXIT 7") || strings.Contains(r.Stdout, "SIGNALLED") {
				t.Errorf("exit %d after %s (want the program's own 7, unsignalled)\nstdout %s\nstderr %s", r.Code, took, r.Stdout, r.Stderr)
			}
		})
	}
}

// TestTraceSpawnSeccompChildren: the filter of `--engine ptrace -e … --
// CMD` passes to every process CMD starts, and a filtered call without a
// tracer fails with ENOSYS. pyobs follows those processes (a child python
// through subprocess, a fork without exec) only to pass their stops
// through: each says its own 300 failing stats failed with ENOENT, not
// ENOSYS, none of them is counted, and a child left running after CMD
// exits is served until it ends (pyobs returns after it, with CMD's
// status). Beside a CPU hog.
func TestTraceSpawnSeccompChildren(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	py := testutil.Find(t, "pyenv-3.12")
	script := filepath.Join(testutil.Repo(), "testdata", "targets", "trace_seccomp_kids.py")
	const n = 300
	run := func(t *testing.T, mode string, extra ...string) (testutil.Result, string, traceOut, int) {
		dir := t.TempDir()
		report, o := filepath.Join(dir, "report"), filepath.Join(dir, "t.json")
		argv := append([]string{"trace", "--engine", "ptrace", "-e", "newfstatat", "--format", "json", "-o", o, "--"}, py.Argv...)
		argv = append(append(argv, script, mode, strconv.Itoa(n), report), extra...)
		r := testutil.RunCmd(t, 60*time.Second, exec.Command(testutil.Binary(t), argv...))
		b, err := os.ReadFile(report)
		if err != nil {
			t.Fatalf("the target's report: %v (exit %d, stderr %s)", err, r.Code, r.Stderr)
		}
		var out traceOut
		var kids struct {
			Children int `json:"children_passed_through"`
		}
		readJSONInto(t, o, &out)
		readJSONInto(t, o, &kids)
		return r, string(b), out, kids.Children
	}
	// each process's own account: its role's line says all n failed with ENOENT
	own := func(t *testing.T, report string, roles ...string) {
		t.Helper()
		for _, role := range roles {
			ok := false
			for _, l := range strings.Split(report, "\n") {
				if strings.HasPrefix(l, role+" ") && strings.HasSuffix(l, fmt.Sprintf(" ENOENT=%d other=0", n)) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: no line with its %d stats failing as ENOENT alone:\n%s", role, n, report)
			}
		}
	}
	t.Run("wait", func(t *testing.T) {
		r, report, out, kids := run(t, "wait")
		if r.Code != 0 || !strings.Contains(r.Stdout, "CHILD 0 FORK 0") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
		}
		own(t, report, "parent", "child", "fork")
		if kids != 2 {
			t.Errorf("children passed through: %d, want 2 (the subprocess and the fork)", kids)
		}
		// The parent's n and its start-up's misses; the children's 2n not.
		var enoent uint64
		for _, s := range out.Syscalls {
			if s.Name == "newfstatat" {
				enoent = s.Errnos["ENOENT"]
			}
		}
		if enoent < n || enoent >= 2*n {
			t.Errorf("newfstatat ENOENT counted %d: want the parent's %d and its start-up's, none of the children's", enoent, n)
		}
		if !strings.Contains(r.Stderr, "2 processes the command started ran under its -e filter") {
			t.Errorf("footer: %s", r.Stderr)
		}
	})
	t.Run("leave", func(t *testing.T) {
		start := time.Now()
		r, report, _, _ := run(t, "leave", "1")
		took := time.Since(start)
		if r.Code != 3 {
			t.Fatalf("exit %d (want CMD's 3)\nstderr %s", r.Code, r.Stderr)
		}
		own(t, report, "child") // written before pyobs returned
		if took < time.Second {
			t.Errorf("pyobs returned after %s, before the child's 1 s delay ended", took)
		}
		if !strings.Contains(r.Stderr, "to what it started that still runs under its filter (1 process)") {
			t.Errorf("footer: %s", r.Stderr)
		}
	})
	// pyobs asked to end while it waits for a child left running: the
	// signal is passed on to the child, which it would otherwise wait for
	// (60 s here), and no process of the command is left.
	t.Run("leave-term", func(t *testing.T) {
		dir := t.TempDir()
		report := filepath.Join(dir, "report")
		argv := append([]string{"trace", "--engine", "ptrace", "-e", "newfstatat", "-o", filepath.Join(dir, "t.txt"), "--"}, py.Argv...)
		cmd := exec.Command(testutil.Binary(t), append(argv, script, "leave", strconv.Itoa(n), report, "60")...)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; done <- nil; killByArg(report, cmd.Process.Pid) })
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "still runs under its filter"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no footer after the command exited: %s", stderr.String())
			}
		}
		if len(pidsByArg(report, cmd.Process.Pid)) != 1 {
			t.Fatalf("the child left running is not running: %v", pidsByArg(report, cmd.Process.Pid))
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			done <- err
		case <-time.After(15 * time.Second):
			t.Fatalf("pyobs did not end within 15 s of SIGTERM: %s", stderr.String())
		}
		if left := pidsByArg(report, cmd.Process.Pid); len(left) > 0 {
			t.Errorf("processes of the command left: %v", left)
		}
		if b, _ := os.ReadFile(report); len(b) > 0 {
			t.Errorf("the child ran its stats: %s", b)
		}
	})
}

// pidsByArg lists the processes with arg in their command line, but not
// this test's pyobs (whose own arguments name it too).
func pidsByArg(arg string, pyobs int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pyobs {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func killByArg(arg string, pyobs int) {
	for _, p := range pidsByArg(arg, pyobs) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}
