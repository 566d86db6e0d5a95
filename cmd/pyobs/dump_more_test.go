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

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpLocals: the parked frame's simple locals render as the target's
// own repr(); containers as their length.
func TestDumpLocals(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata/targets/locals.py")), 30*time.Second)
			out := filepath.Join(t.TempDir(), "locals.json")
			r := testutil.Run(t, 30*time.Second, "dump", "--locals", "--format", "json", "-o", out, "-p", fmt.Sprint(tg.Pid))
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			fi, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("--locals output has mode %v, want 0600", fi.Mode().Perm())
			}
			b, _ := os.ReadFile(out)
			var d struct {
				Threads []struct {
					Frames []struct {
						Function string
						Locals   []struct{ Name, Type, Value string }
					}
				}
			}
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			truth := readTruthLine(t, tg)
			var got map[string][2]string
			for _, th := range d.Threads {
				for _, f := range th.Frames {
					if f.Function == "parked" {
						got = map[string][2]string{}
						for _, l := range f.Locals {
							got[l.Name] = [2]string{l.Type, l.Value}
						}
					}
				}
			}
			if got == nil {
				t.Fatalf("no frame 'parked' in dump: %s", b)
			}
			for name, w := range truth {
				g, ok := got[name]
				if !ok {
					t.Errorf("local %s missing", name)
					continue
				}
				if g[0] != w.Type || g[1] != w.Value {
					t.Errorf("local %s = %s (%s), want %s (%s)", name, g[1], g[0], w.Value, w.Type)
				}
			}
		})
	}
}

type localTruth struct{ Type, Value string }

// readTruthLine reads the JSON line the locals target printed before READY.
func readTruthLine(t *testing.T, tg *testutil.Target) map[string]localTruth {
	t.Helper()
	select {
	case line := <-tg.Lines:
		var m map[string]localTruth
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad truth line %q: %v", line, err)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("target printed no truth line")
	}
	return nil
}

// TestDumpChurningStack: a target whose stack changes all the time never
// yields a garbage frame: every frame is one of the target's functions (or
// threading's) with a line inside its file; torn reads are retried and counted.
func TestDumpChurningStack(t *testing.T) {
	testutil.RequireRoot(t)
	script := filepath.Join(testutil.Repo(), "testdata/targets/busy.py")
	nlines := countLines(t, script)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script), 30*time.Second)
			allowed := map[string]bool{"leaf": true, "recurse": true, "crunch": true, "sleep_forever": true, "<module>": true}
			var retries uint64
			inconsistent, gilCruncher, dumps := 0, 0, 25
			for i := 0; i < dumps; i++ {
				d := dumpJSON(t, "-p", fmt.Sprint(tg.Pid))
				retries += d.Read.TornRetries
				inconsistent += d.Read.Torn
				for _, th := range d.Threads {
					if th.HoldsGIL && th.Name == "cruncher" {
						gilCruncher++
					}
					if th.HoldsGIL && th.Name == "sleeper" {
						t.Errorf("dump %d: the sleeping thread is reported holding the GIL", i)
					}
					for _, f := range th.Frames {
						if f.File == script {
							if !allowed[f.Function] || f.Line < 1 || f.Line > nlines {
								t.Errorf("dump %d: garbage frame %s (%s:%d)", i, f.Function, f.File, f.Line)
							}
						} else if !strings.HasSuffix(f.File, "threading.py") {
							t.Errorf("dump %d: frame from unexpected file %s (%s:%d)", i, f.Function, f.File, f.Line)
						}
					}
					if th.Name == "cruncher" && th.Consistent && len(th.Frames) > 0 {
						if top := th.Frames[0].Function; top != "leaf" && top != "recurse" && top != "crunch" {
							t.Errorf("dump %d: cruncher's innermost frame is %s", i, top)
						}
					}
				}
			}
			if gilCruncher < dumps/3 {
				t.Errorf("the CPU-bound thread held the GIL in only %d of %d dumps", gilCruncher, dumps)
			}
			t.Logf("%d dumps: %d torn reads retried, %d threads left inconsistent, cruncher held the GIL in %d", dumps, retries, inconsistent, gilCruncher)
		})
	}
}

func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n") + 1
}

// oneLineError checks the error contract: non-zero exit, nothing on stdout,
// exactly one line on stderr that contains each of want.
func oneLineError(t *testing.T, r testutil.Result, code int, want ...string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit %d, want %d (stderr %q)", r.Code, code, r.Stderr)
	}
	if r.Stdout != "" {
		t.Errorf("stdout not empty: %q", r.Stdout)
	}
	lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Errorf("stderr has %d lines, want exactly 1: %q", len(lines), r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("stderr %q does not mention %q", r.Stderr, w)
		}
	}
	if strings.Contains(r.Stderr, "panic") || strings.Contains(r.Stderr, "goroutine") {
		t.Errorf("stderr looks like a crash: %q", r.Stderr)
	}
}

// TestDumpBadInput: every bad input gets one clear line and its exit code.
func TestDumpBadInput(t *testing.T) {
	testutil.RequireRoot(t)
	run := func(args ...string) testutil.Result { return testutil.Run(t, 30*time.Second, args...) }

	t.Run("no-such-pid", func(t *testing.T) {
		b, _ := os.ReadFile("/proc/sys/kernel/pid_max")
		var max int
		fmt.Sscan(string(b), &max)
		oneLineError(t, run("dump", "-p", fmt.Sprint(max+1)), exitNoTarget, "no such process")
	})
	t.Run("kernel-thread", func(t *testing.T) {
		oneLineError(t, run("dump", "-p", "2"), exitNoTarget, "kernel thread")
	})
	t.Run("zombie", func(t *testing.T) {
		py := testutil.Find(t, "pyenv-3.12")
		tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c",
			"import os,time\npid=os.fork()\nif pid==0: os._exit(0)\ntime.sleep(0.3)\nprint('READY', pid, flush=True)\ntime.sleep(60)"), 20*time.Second)
		_ = tg
		var zpid int
		select {
		case <-time.After(time.Second):
		case <-tg.Lines:
		}
		zpid = findChild(t, tg.Pid)
		oneLineError(t, run("dump", "-p", fmt.Sprint(zpid)), exitNoTarget, "zombie", fmt.Sprint(zpid))
	})
	t.Run("not-python", func(t *testing.T) {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		time.Sleep(100 * time.Millisecond)
		oneLineError(t, run("dump", "-p", fmt.Sprint(cmd.Process.Pid)), exitNotPython, "not a Python process", "(sleep)")
	})
	t.Run("unsupported-version", func(t *testing.T) {
		matches, _ := filepath.Glob(filepath.Join(pyenvRoot(), "versions", "3.9.*", "bin", "python3.9"))
		if len(matches) == 0 {
			testutil.Skip(t, "no pyenv 3.9 interpreter to stand for an unsupported version")
		}
		tg := testutil.StartArgv(t, []string{matches[0], "-c", "import time\nprint('READY', flush=True)\ntime.sleep(60)"}, 20*time.Second)
		oneLineError(t, run("dump", "-p", fmt.Sprint(tg.Pid)), exitNotPython, "unsupported Python 3.9", "3.10 to 3.15")
	})
	t.Run("permission", func(t *testing.T) {
		py := testutil.Find(t, "pyenv-3.12")
		tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c", "import time\nprint('READY', flush=True)\ntime.sleep(60)"), 20*time.Second)
		cmd := exec.Command(testutil.Binary(t), "dump", "-p", fmt.Sprint(tg.Pid))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		oneLineError(t, testutil.RunCmd(t, 30*time.Second, cmd), exitPermission, "permission denied", "CAP_SYS_PTRACE")
	})
	t.Run("bad-format", func(t *testing.T) {
		oneLineError(t, run("dump", "-p", "1", "--format", "xml"), exitUsage, "--format", "xml")
	})
	t.Run("no-target", func(t *testing.T) {
		oneLineError(t, run("dump"), exitUsage, "-p PID")
	})
	t.Run("pid-and-command", func(t *testing.T) {
		oneLineError(t, run("dump", "-p", "1", "--", "python3"), exitUsage, "not both")
	})
	t.Run("unknown-flag", func(t *testing.T) {
		oneLineError(t, run("dump", "--frobnicate"), exitUsage, "frobnicate")
	})
	t.Run("negative-pid", func(t *testing.T) {
		oneLineError(t, run("dump", "-p", "-5"), exitUsage, "invalid pid")
	})
	t.Run("unknown-command", func(t *testing.T) {
		oneLineError(t, run("flamegraph"), exitUsage, "unknown command")
	})
	t.Run("spawn-missing-program", func(t *testing.T) {
		oneLineError(t, run("dump", "--", "/nonexistent/python"), 127, "cannot run /nonexistent/python")
	})
	// A target that exits while being read: either a dump or the one-line
	// "exited" error — never a crash, never another kind of failure.
	t.Run("exits-mid-read", func(t *testing.T) {
		py := testutil.Find(t, "pyenv-3.12")
		outcomes := map[int]int{}
		for i := 0; i < 15; i++ {
			cmd := exec.Command(py.Argv[0], "-c", "import time\ndef f(n):\n    return f(n-1) if n else time.sleep(0.05)\nf(200)")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(20+i*3) * time.Millisecond)
			r := run("dump", "-p", fmt.Sprint(cmd.Process.Pid))
			cmd.Wait()
			outcomes[r.Code]++
			switch r.Code {
			case 0:
			case exitNoTarget, exitNotPython:
				if n := strings.Count(strings.TrimRight(r.Stderr, "\n"), "\n"); n != 0 || r.Stderr == "" {
					t.Errorf("exit %d with stderr %q", r.Code, r.Stderr)
				}
			default:
				t.Errorf("exit %d: %q", r.Code, r.Stderr)
			}
		}
		t.Logf("outcomes by exit code: %v", outcomes)
	})
}

func findChild(t *testing.T, ppid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("no child of %d: %q", ppid, b)
	}
	return pid
}

// TestDumpSpawn: -- CMD runs the program, dumps once Python runs, then
// passes on the program's exit status; --kill ends it.
func TestDumpSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	script := "import sys,time\ndef waiting():\n    time.sleep(0.6)\nwaiting()\nsys.exit(7)"
	args := append([]string{"dump", "--after", "200ms", "--"}, py.Argv...)
	r := testutil.Run(t, 30*time.Second, append(args, "-c", script)...)
	if r.Code != 7 {
		t.Errorf("exit %d, want the program's 7 (stderr %q)", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "line 3, in waiting") {
		t.Errorf("dump of the spawned program lacks its frame:\n%s", r.Stdout)
	}
	start := time.Now()
	args = append([]string{"dump", "--kill", "--after", "100ms", "--"}, py.Argv...)
	r = testutil.Run(t, 30*time.Second, append(args, "-c", "import time\ntime.sleep(60)")...)
	if r.Code != 0 || time.Since(start) > 20*time.Second {
		t.Errorf("--kill: exit %d after %v (stderr %q)", r.Code, time.Since(start), r.Stderr)
	}
	// A program that is not Python: a clear error once it exits.
	r = testutil.Run(t, 30*time.Second, "dump", "--", "sh", "-c", "sleep 0.3")
	oneLineError(t, r, exitNotPython, "not a Python")
}
