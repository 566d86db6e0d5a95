package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// remoteExecInterps are the interpreters with PEP 768 (sid 3.14 and 3.15).
func remoteExecInterps(t *testing.T) []testutil.Interp {
	t.Helper()
	return []testutil.Interp{testutil.Find(t, "sid-3.14"), testutil.Find(t, "sid-3.15")}
}

// startInline writes src to a temporary script and starts it under interp
// (with extra interpreter options and environment) until it prints READY.
func startInline(t *testing.T, interp testutil.Interp, src string, opts []string, env ...string) *testutil.Target {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target.py")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{}, interp.Argv...), opts...), p)
	if len(env) == 0 {
		return testutil.StartArgv(t, argv, 30*time.Second)
	}
	old := map[string]*string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if o, ok := os.LookupEnv(k); ok {
			old[k] = &o
		} else {
			old[k] = nil
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, v := range old {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}()
	return testutil.StartArgv(t, argv, 30*time.Second)
}

func nextLine(t *testing.T, tg *testutil.Target, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-tg.Lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-deadline:
			t.Fatalf("the target printed no %q line within %v", prefix, within)
		}
	}
}

const threadsTarget = `
import json, threading, time
def work():
    while True:
        sum(range(500)); time.sleep(0.002)
for n in ("alpha", "beta", "gamma"):
    threading.Thread(target=work, name="worker-" + n, daemon=True).start()
print("READY", flush=True)
print("NAMES " + json.dumps(sorted(t.name for t in threading.enumerate())), flush=True)
while True:
    time.sleep(0.01)
    print("TICK", flush=True)
`

func TestExecThreadNames(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range remoteExecInterps(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := startInline(t, in, threadsTarget, nil)
			want := nextLine(t, tg, "NAMES ", 10*time.Second)
			script := filepath.Join(t.TempDir(), "names.py")
			os.WriteFile(script, []byte("import json, threading\nprint(json.dumps(sorted(t.name for t in threading.enumerate())))\n"), 0o644)
			r := testutil.Run(t, 30*time.Second, "exec", "-p", strconv.Itoa(tg.Pid), script)
			if r.Code != 0 {
				t.Fatalf("exec: exit %d\nstderr: %s", r.Code, r.Stderr)
			}
			var got, exp []string
			if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
				t.Fatalf("exec output %q: %v", r.Stdout, err)
			}
			json.Unmarshal([]byte(want), &exp)
			if strings.Join(got, ",") != strings.Join(exp, ",") {
				t.Fatalf("threads: exec saw %v, the target reports %v", got, exp)
			}
			// The channel is gone and the target's own output was not mixed in.
			if m, _ := filepath.Glob("/tmp/pyobs-exec-*"); len(m) > 0 {
				for _, d := range m {
					if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) < time.Minute {
						t.Errorf("channel directory %s left behind", d)
					}
				}
			}
			if strings.Contains(r.Stdout, "TICK") {
				t.Errorf("the target's own output leaked into pyobs's: %q", r.Stdout)
			}
		})
	}
}

func TestExecException(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range remoteExecInterps(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := startInline(t, in, threadsTarget, nil)
			pid := strconv.Itoa(tg.Pid)
			r := testutil.Run(t, 30*time.Second, "exec", "-p", pid, "-c", "print('before')\nraise ValueError('boom from the script')\n")
			if r.Code != 1 || !strings.Contains(r.Stderr, "ValueError: boom from the script") || !strings.Contains(r.Stderr, "the target goes on") {
				t.Fatalf("exec of a raising script: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
			}
			if r.Stdout != "before\n" {
				t.Errorf("output before the exception: %q", r.Stdout)
			}
			// The target keeps going: it still ticks and still runs scripts.
			nextLine(t, tg, "TICK", 5*time.Second)
			r = testutil.Run(t, 30*time.Second, "exec", "-p", pid, "-c", "print('still here')")
			if r.Code != 0 || r.Stdout != "still here\n" {
				t.Fatalf("exec after the exception: exit %d, stdout %q, stderr %s", r.Code, r.Stdout, r.Stderr)
			}
		})
	}
}

// A main thread blocked in os.read never reaches a safe point; with a
// SIGWINCH handler (as terminal programs have) --nudge interrupts the read.
const blockedTarget = `
import os, signal, sys
if "handler" in sys.argv:
    signal.signal(signal.SIGWINCH, lambda *a: None)
r, w = os.pipe()
print("READY", flush=True)
while True:
    os.read(r, 1)
`

func TestExecBlockedNudge(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	p := filepath.Join(t.TempDir(), "blocked.py")
	os.WriteFile(p, []byte(blockedTarget), 0o644)
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), p, "handler"), 30*time.Second)
	pid := strconv.Itoa(tg.Pid)
	time.Sleep(200 * time.Millisecond) // into the read
	r := testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--timeout", "1s", "-c", "print('ran')")
	if r.Code == 0 || !strings.Contains(r.Stderr, "never reached a safe point within 1s (blocked in read?)") {
		t.Fatalf("exec on a blocked thread: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	r = testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--timeout", "5s", "--nudge", "-c", "print('ran')")
	if r.Code != 0 || r.Stdout != "ran\n" || !strings.Contains(r.Stderr, "sent SIGWINCH") {
		t.Fatalf("exec --nudge on a blocked thread: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	// Without a handler, --nudge refuses rather than send SIGINT.
	tg2 := testutil.StartArgv(t, append(append([]string{}, in.Argv...), p), 30*time.Second)
	r = testutil.Run(t, 30*time.Second, "exec", "-p", strconv.Itoa(tg2.Pid), "--timeout", "1s", "--nudge", "-c", "print('ran')")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--nudge-signal") {
		t.Fatalf("exec --nudge without a harmless handler: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	if !testutilAlive(tg2.Pid) || !testutilAlive(tg.Pid) {
		t.Fatal("a target died")
	}
}

func testutilAlive(pid int) bool {
	st := testutil.ProcStatus(pid)
	return st != nil && !strings.HasPrefix(st["State"], "Z")
}

func TestExecRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	const idle = "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.01)\n"
	sid := testutil.Find(t, "sid-3.14")
	cases := []struct {
		name   string
		interp testutil.Interp
		opts   []string
		env    []string
		want   string
		code   int // README's exit status; 0: any failure
	}{
		{"pre-3.14", testutil.Find(t, "pyenv-3.13"), nil, nil, "needs CPython 3.14+", 5},
		{"pre-3.14 (3.12)", testutil.Find(t, "pyenv-3.12"), nil, nil, "needs CPython 3.14+", 5},
		{"-X disable-remote-debug", sid, []string{"-X", "disable-remote-debug"}, nil, "remote debugging is disabled", 5},
		{"PYTHON_DISABLE_REMOTE_DEBUG", sid, nil, []string{"PYTHON_DISABLE_REMOTE_DEBUG=1"}, "remote debugging is disabled", 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := startInline(t, c.interp, idle, c.opts, c.env...)
			r := testutil.Run(t, 30*time.Second, "exec", "-p", strconv.Itoa(tg.Pid), "-c", "print('ran')")
			if r.Code == 0 || c.code != 0 && r.Code != c.code || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
				t.Fatalf("exit %d, want one line with %q\nstdout: %s\nstderr: %s", r.Code, c.want, r.Stdout, r.Stderr)
			}
		})
	}
}

// pyobs killed while its request waits: when the thread comes back to the
// eval loop later, the script finds pyobs's lock free, runs nothing and
// removes pyobs's files.
func TestExecOrphanRunsNothing(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	p := filepath.Join(t.TempDir(), "blocked.py")
	os.WriteFile(p, []byte(blockedTarget), 0o644)
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), p, "handler"), 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	marker := filepath.Join(t.TempDir(), "ran")
	before, _ := filepath.Glob("/tmp/pyobs-exec-*")
	cmd := exec.Command(testutil.Binary(t), "exec", "-p", strconv.Itoa(tg.Pid), "--timeout", "60s", "-c", "open("+strconv.Quote(marker)+", 'w').close()")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	for deadline := time.Now().Add(10 * time.Second); dir == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		now, _ := filepath.Glob("/tmp/pyobs-exec-*")
		for _, d := range now {
			if !slices.Contains(before, d) {
				if _, err := os.Stat(filepath.Join(d, "run-1.py")); err == nil {
					dir = d
				}
			}
		}
	}
	if dir == "" {
		cmd.Process.Kill()
		t.Fatal("pyobs exec wrote no request")
	}
	cmd.Process.Kill()
	cmd.Wait()
	syscall.Kill(tg.Pid, syscall.SIGWINCH) // back to the eval loop
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there after the target's safe point", dir)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the script ran after pyobs died")
	}
	if !testutilAlive(tg.Pid) {
		t.Fatal("the target died")
	}
}

// The main thread blocked, another running Python: the timeout names the
// running thread, and --tid runs the script there.
func TestExecTid(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.15")
	tg := startInline(t, in, `
import os, threading
def spin():
    print("SPINNER", threading.get_native_id(), flush=True)
    while True:
        sum(range(1000))
r, w = os.pipe()
print("READY", flush=True)
threading.Thread(target=spin, name="spinner", daemon=True).start()
os.read(r, 1)
`, nil)
	tid := strings.TrimSpace(nextLine(t, tg, "SPINNER ", 10*time.Second))
	pid := strconv.Itoa(tg.Pid)
	r := testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--timeout", "1s", "-c", "print('x')")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--tid one of the Python threads running now: "+tid) {
		t.Fatalf("exec on a blocked main thread: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	r = testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--tid", tid, "-c", "import threading; print(threading.current_thread().name)")
	if r.Code != 0 || r.Stdout != "spinner\n" {
		t.Fatalf("exec --tid %s: exit %d\nstdout: %s\nstderr: %s", tid, r.Code, r.Stdout, r.Stderr)
	}
	// --any-thread moves the request there by itself.
	r = testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--any-thread", "--timeout", "5s", "-c", "import threading; print(threading.current_thread().name)")
	if r.Code != 0 || r.Stdout != "spinner\n" {
		t.Fatalf("exec --any-thread: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}

// --nudge-signal names a signal the target catches: KILL and STOP (which
// can't be caught) and signals it does not catch (TERM would end it) are
// refused with exit 2 and one line, nothing is sent, the target lives; the
// one it catches interrupts its blocking read.
func TestExecNudgeSignalRefused(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	p := filepath.Join(t.TempDir(), "blocked.py")
	if err := os.WriteFile(p, []byte(blockedTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), p, "handler"), 30*time.Second)
	pid := strconv.Itoa(tg.Pid)
	time.Sleep(200 * time.Millisecond) // into the read
	for _, c := range []struct{ sig, want string }{
		{"SIGKILL", "SIGKILL can't be caught: it would kill the target"},
		{"9", "SIGKILL can't be caught"},
		{"STOP", "SIGSTOP can't be caught: it would stop the target"},
		{"TERM", "does not catch SIGTERM"},
		{"SIGUSR1", "does not catch SIGUSR1"},
	} {
		r := testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--timeout", "3s", "--nudge", "--nudge-signal", c.sig, "-c", "print('ran')")
		if r.Code != 2 || r.Stdout != "" || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("--nudge-signal %s: exit %d, want 2 and one line with %q\nstdout: %s\nstderr: %s", c.sig, r.Code, c.want, r.Stdout, r.Stderr)
		}
		if !testutilAlive(tg.Pid) || strings.HasPrefix(testutil.ProcStatus(tg.Pid)["State"], "T") {
			t.Fatalf("--nudge-signal %s: the target is %q", c.sig, testutil.ProcStatus(tg.Pid)["State"])
		}
	}
	r := testutil.Run(t, 30*time.Second, "exec", "-p", pid, "--timeout", "5s", "--nudge", "--nudge-signal", "WINCH", "-c", "print('ran')")
	if r.Code != 0 || r.Stdout != "ran\n" || !strings.Contains(r.Stderr, "sent SIGWINCH") {
		t.Fatalf("--nudge-signal WINCH (caught): exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestExecTargetExitsCleansUp: a target killed while a request waits
// (blocked, no safe point) leaves no channel behind in /tmp: the channel
// is removed through directories held open, its /proc/PID/root gone.
func TestExecTargetExitsCleansUp(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	p := filepath.Join(t.TempDir(), "blocked.py")
	if err := os.WriteFile(p, []byte(blockedTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), p), 20*time.Second)
	before, _ := filepath.Glob("/tmp/pyobs-exec-*")
	done := make(chan testutil.Result, 1)
	go func() {
		done <- testutil.Run(t, time.Minute, "exec", "-p", strconv.Itoa(tg.Pid), "--timeout", "20s", "-c", "print(1)")
	}()
	var made []string
	for end := time.Now().Add(10 * time.Second); len(made) == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		now, _ := filepath.Glob("/tmp/pyobs-exec-*")
		made = newPaths(before, now)
	}
	if len(made) == 0 {
		t.Fatal("no channel was made")
	}
	_ = syscall.Kill(tg.Pid, syscall.SIGKILL)
	r := <-done
	if r.Code == 0 {
		t.Errorf("exec of a killed target: exit 0: %s", r.Stderr)
	}
	for _, m := range made {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("%s left behind after the target's death (%s)", m, strings.TrimSpace(r.Stderr))
			_ = os.RemoveAll(m)
		}
	}
}

// TestExecExceptionNameEscaped: pyobs's own line about a script's
// exception carries its name escaped (the target chose it).
func TestExecExceptionNameEscaped(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "sid-3.14"), threadsTarget, nil)
	r := testutil.Run(t, 30*time.Second, "exec", "-p", strconv.Itoa(tg.Pid), "-c", "class E(Exception): pass\nE.__name__ = 'X\\x1b[2J'\nraise E('a')\n")
	line := r.Stderr[strings.LastIndex(strings.TrimSpace(r.Stderr), "\n")+1:]
	if r.Code != 1 || !strings.Contains(line, `X\x1b[2J`) || strings.Contains(line, "\x1b") {
		t.Errorf("exit %d, last line %q", r.Code, line)
	}
}

func newPaths(before, now []string) []string {
	had := map[string]bool{}
	for _, b := range before {
		had[b] = true
	}
	var out []string
	for _, n := range now {
		if !had[n] {
			out = append(out, n)
		}
	}
	return out
}

// TestExecStoppedTarget: a target stopped by someone else never takes the
// request; the refusal says it is stopped (not a syscall to nudge), and
// it is left stopped.
func TestExecStoppedTarget(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "sid-3.14"), "import time\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.01)\n", nil)
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	r := testutil.Run(t, 30*time.Second, "exec", "-p", strconv.Itoa(tg.Pid), "--timeout", "1s", "-c", "print('ran')")
	if r.Code == 0 || !strings.Contains(r.Stderr, "it is stopped (state T") || strings.Contains(r.Stderr, "--nudge") {
		t.Errorf("exit %d: %s", r.Code, r.Stderr)
	}
	if st := testutil.ProcStatus(tg.Pid); st == nil || !strings.HasPrefix(st["State"], "T") {
		t.Errorf("the target's state after exec: %v", st["State"])
	}
}

// TestExecInterrupted: SIGINT to pyobs while the script runs in the target
// ends pyobs with one line naming the signal; the script finishes in the
// target, whose stderr stays clean (the script's last write, into pyobs's
// folder, removed by then, once raised a traceback there).
func TestExecInterrupted(t *testing.T) {
	testutil.RequireRoot(t)
	errf := filepath.Join(t.TempDir(), "target.err")
	tg := startInline(t, testutil.Find(t, "sid-3.14"), "import os, time\nfd = os.open("+strconv.Quote(errf)+", os.O_WRONLY | os.O_CREAT, 0o644)\nos.dup2(fd, 2)\nprint('READY', flush=True)\nwhile True:\n    time.sleep(0.01)\n", nil)
	cmd := exec.Command(testutil.Binary(t), "exec", "-p", strconv.Itoa(tg.Pid), "-c", "import time; time.sleep(2); print('done')")
	go func() {
		time.Sleep(1 * time.Second)
		_ = cmd.Process.Signal(syscall.SIGINT)
	}()
	r := testutil.RunCmd(t, 30*time.Second, cmd)
	if r.Code == 0 || !strings.Contains(r.Stderr, "interrupted by SIGINT while the script runs in the target") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Errorf("exit %d, stderr %q: want one line naming SIGINT", r.Code, r.Stderr)
	}
	time.Sleep(3 * time.Second) // the script ends in the target
	if b, _ := os.ReadFile(errf); len(b) != 0 {
		t.Errorf("the target's stderr: %s", b)
	}
	requireRunning(t, tg.Pid)
}
