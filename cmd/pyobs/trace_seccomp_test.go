package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
