package session

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestAttachErrors: the sentinel errors the CLI maps to exit codes.
func TestAttachErrors(t *testing.T) {
	if _, err := Attach(0); err == nil {
		t.Error("Attach(0) succeeded")
	}
	b, _ := os.ReadFile("/proc/sys/kernel/pid_max")
	max := 0
	for _, c := range strings.TrimSpace(string(b)) {
		max = max*10 + int(c-'0')
	}
	if _, err := Attach(max + 1); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Attach(pid_max+1): %v, want ErrNoProcess", err)
	}
	if _, err := Attach(2); !errors.Is(err, ErrKernelThread) {
		t.Errorf("Attach(2): %v, want ErrKernelThread", err)
	}
	if _, err := Attach(os.Getpid()); !errors.Is(err, ErrNotPython) {
		t.Errorf("Attach(self): %v, want ErrNotPython", err)
	}
}

// TestHostTidsSameNamespace: a target in our pid namespace needs no mapping.
func TestHostTidsSameNamespace(t *testing.T) {
	s := &Session{Pid: os.Getpid()}
	if m := s.hostTids(); m != nil {
		t.Errorf("hostTids of ourselves = %v, want nil", m)
	}
}

// TestSetSpecDescribe: the words of an agent's start line for a set.
func TestSetSpecDescribe(t *testing.T) {
	if got, want := (SetSpec{Pids: []int{7, 8}, Children: true, Cgroup: "/sys/fs/cgroup/app"}).Describe(), "2 more pid(s), children, cgroup /sys/fs/cgroup/app"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if got := (SetSpec{}).Describe(); got != "" {
		t.Errorf("empty spec: %q", got)
	}
}

// TestRefusalAfterExecIsTheExec: a ptrace refusal met after the target
// exec'd is said as the exec (exit 3), not as a permission gate (exit 4):
// CI once saw a seize refused while a thread of the target exec'd, and
// pyobs blamed a security module it had not found.
func TestRefusalAfterExecIsTheExec(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	// It execs at SIGUSR1 (blocked, then waited for: none is lost).
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c",
		"import os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\nprint('READY', flush=True)\nsignal.sigwait({signal.SIGUSR1})\nos.execv('/bin/sleep', ['sleep', '30'])"), 20*time.Second)
	s, err := Attach(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var gate *GateError
	// Before the exec, a refusal is the gate's: the control that shows the
	// check below can fail.
	if err := s.explain("stop threads", unix.EPERM); !errors.As(err, &gate) {
		t.Fatalf("refusal before the exec: %v, want a GateError", err)
	}
	if err := unix.Kill(tg.Pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", tg.Pid))
		if string(b) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target did not exec within 10 s (comm %q)", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	err = s.explain("stop threads", unix.EPERM)
	if !IsExeced(err) || errors.As(err, &gate) {
		t.Fatalf("refusal after the exec: %v, want the exec", err)
	}
	if !strings.Contains(err.Error(), "stop threads of pid") || !strings.Contains(err.Error(), "sleep 30") {
		t.Errorf("error %q does not say what failed and what the target became", err)
	}
}

// TestExecedNowShort: the program a target became is said on one line,
// escaped, and cut (a python -c script would fill a screen).
func TestExecedNowShort(t *testing.T) {
	script := "import time\n" + strings.Repeat("x = 1\n", 200) + "\x1b[2J"
	e := &ExecedError{Pid: 7, Argv: []string{"python3", "-c", script}, Was: "python3 " + strings.Repeat("a", 300)}
	now, msg := e.Now(), e.Error()
	if n := len([]rune(now)); n > nowMax || !strings.HasSuffix(now, "…") || strings.ContainsAny(now, "\n\x1b") {
		t.Errorf("Now() = %q (%d characters)", now, n)
	}
	if len(msg) > 3*nowMax+200 || strings.ContainsAny(msg, "\n\x1b") {
		t.Errorf("Error() = %q", msg)
	}
}
