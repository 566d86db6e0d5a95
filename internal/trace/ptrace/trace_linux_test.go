package ptrace

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: these tests need root (CAP_SYS_PTRACE)")
		}
		t.Skip("needs root (CAP_SYS_PTRACE) to trace")
	}
}

func TestTraceSpawnExitStatus(t *testing.T) {
	needRoot(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh: " + err.Error())
	}
	var calls int
	st, err := Trace(context.Background(), TraceConfig{
		Argv: []string{sh, "-c", "echo hi >/dev/null; exit 3"},
		OnExit: func(c *Syscall) {
			calls++
			if c.Dur < 0 || c.Tid <= 0 {
				t.Errorf("bad call %+v", c)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 3 || !st.TargetGone || calls == 0 || uint64(calls) != st.Syscalls {
		t.Fatalf("stats %+v, calls %d", st, calls)
	}
}

// A spawned command's start (its group stop and the SIGCONT that ends
// it: pyobs's own) is neither a stop by someone else nor a signal passed
// on; a signal the command sends itself is (the control).
func TestTraceSpawnOwnStopNotCounted(t *testing.T) {
	needRoot(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh: " + err.Error())
	}
	for _, c := range []struct {
		script  string
		signals uint64
	}{{"exit 0", 0}, {"trap : USR1; kill -USR1 $$; exit 0", 1}} {
		st, err := Trace(context.Background(), TraceConfig{Argv: []string{sh, "-c", c.script}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Signals != c.signals || st.GroupStops != 0 || st.GroupStoppedMax != 0 || st.GroupStopped != 0 {
			t.Errorf("%q: signals %d (want %d), group stops %d, max %d, %v: want none",
				c.script, st.Signals, c.signals, st.GroupStops, st.GroupStoppedMax, st.GroupStopped)
		}
	}
}

// Attaching to a process that is not ours (an orphan, as -p targets are),
// blocked in a syscall: the trace must end on time and leave it untraced.
func TestTraceAttachDetach(t *testing.T) {
	needRoot(t)
	out, err := exec.Command("sh", "-c", "sleep 5 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Skip("no sh/sleep: " + err.Error())
	}
	pid := 0
	for _, c := range strings.TrimSpace(string(out)) {
		pid = pid*10 + int(c-'0')
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	st, err := Trace(ctx, TraceConfig{Pid: pid})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("tracing a blocked target did not end on time: %v", time.Since(start))
	}
	// (The wake-up signal may be swallowed by the loop or, if the interrupt
	// stop comes first, left pending: SIGURG/SIGWINCH, ignored by default.)
	if st.Detached != 1 || st.Stops == 0 {
		t.Fatalf("stats %+v", st)
	}
	b, _ := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if !strings.Contains(string(b), "TracerPid:\t0\n") || strings.Contains(string(b), "State:\tt") {
		t.Fatalf("left traced:\n%s", b)
	}
}

func TestTraceRefusesOwnChild(t *testing.T) {
	needRoot(t)
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep: " + err.Error())
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := Trace(context.Background(), TraceConfig{Pid: cmd.Process.Pid}); err == nil || !strings.Contains(err.Error(), "own child") {
		t.Fatalf("err %v", err)
	}
}

func itoa(n int) string { return fmtInt(n) }

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func TestErrnoName(t *testing.T) {
	if ErrnoName(2) != "ENOENT" || ErrnoName(ERESTART_RESTARTBLOCK) != "ERESTART_RESTARTBLOCK" {
		t.Fatal(ErrnoName(2))
	}
	c := Syscall{Ret: -2}
	if c.Errno() != 2 {
		t.Fatal("errno")
	}
	c.Ret = -5000
	if c.Errno() != 0 {
		t.Fatal("large negative is not an errno")
	}
}
