package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary is the holder of its own held commands (/proc/self/exe),
// as pyobs is of its.
func TestMain(m *testing.M) {
	HoldMain()
	os.Exit(m.Run())
}

// heldShell holds `sh -c 'echo $$ > out'`: the file says whether and with
// which pid the command ran.
func heldShell(t *testing.T) (*Session, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ran")
	s, err := Open(context.Background(), Spec{Argv: []string{"sh", "-c", "echo $$ > " + out}, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Held() || s.Py != nil {
		t.Fatalf("held %v, Py %v: want held, no Python read", s.Held(), s.Py)
	}
	return s, out
}

func TestHoldRelease(t *testing.T) {
	s, out := heldShell(t)
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the command ran before its release")
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if code := s.Finish(context.Background(), Wait); code != 0 {
		t.Fatalf("status %d", code)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid != s.Pid {
		t.Errorf("the command ran as pid %d, the session held pid %d", pid, s.Pid)
	}
}

// TestHoldObserverGone: the holder's release pipe closes without a byte
// (pyobs died): the command must not run unobserved.
func TestHoldObserverGone(t *testing.T) {
	s, out := heldShell(t)
	_ = s.hold.release.Close()
	<-s.Exited()
	if code := s.ExitCode(); code != 127 {
		t.Errorf("holder status %d, want 127", code)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the command ran after its observer was gone")
	}
}

func TestHoldUnhold(t *testing.T) {
	s, out := heldShell(t)
	s.Unhold()
	if code := s.ExitCode(); code != 0 {
		t.Errorf("holder status %d, want 0", code)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the command ran though it was let go")
	}
	if s.Held() {
		t.Error("still held")
	}
}

func TestHoldExecFails(t *testing.T) {
	s, err := Open(context.Background(), Spec{Argv: []string{"/nonexistent/pyobs-held"}, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Release()
	var xe *ExecError
	if !errors.As(err, &xe) || xe.Code() != 127 || xe.Pid != s.Pid || !strings.Contains(xe.Error(), "/nonexistent/pyobs-held") {
		t.Fatalf("release: %v; want an ExecError naming the command and pid %d", err, s.Pid)
	}
	if code := s.ExitCode(); code != 127 {
		t.Errorf("holder status %d, want 127", code)
	}
}

// TestHoldFinishUnreleased: Finish on a held command lets it go unrun.
func TestHoldFinishUnreleased(t *testing.T) {
	s, out := heldShell(t)
	s.Finish(context.Background(), Wait)
	if _, err := os.Stat(out); err == nil {
		t.Error("the command ran")
	}
}

// TestExitCPU: a spawned command's CPU seconds come from the kernel's
// account at its exit, after its /proc entry is gone; the shell measures
// its own busy loop (the truth: `times`, user + system of the shell).
func TestExitCPU(t *testing.T) {
	out := filepath.Join(t.TempDir(), "times")
	s, err := Open(context.Background(), Spec{Argv: []string{"sh", "-c",
		`end=$(($(date +%s%N) + 300000000)); while [ "$(date +%s%N)" -lt $end ]; do :; done; times > ` + out}, Python: PythonOptional})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.ExitCPU(); ok {
		t.Error("an exit account before the exit")
	}
	if code := s.Finish(context.Background(), Wait); code != 0 {
		t.Fatalf("status %d", code)
	}
	cpu, ok := s.ExitCPU()
	if !ok {
		t.Fatal("no exit account after the exit")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// `times`: the shell's user and system time, then its children's (the
	// date commands), each "XmY.YYYs".
	var sum, own float64
	for i, f := range strings.Fields(string(b)) {
		var m, sec float64
		if _, err := fmt.Sscanf(f, "%fm%fs", &m, &sec); err == nil {
			sum += 60*m + sec
			if i < 2 {
				own += 60*m + sec
			}
		}
	}
	if sum <= 0 || cpu < 0.8*sum-0.02 || cpu > 1.2*sum+0.02 {
		t.Errorf("exit account %.3fs, the shell's own times %.3fs (%q)", cpu, sum, b)
	}
	// Without its children: the shell's own line (its stat counts in
	// 10 ms ticks, each of `times`'s two figures truncated to one, and the
	// shell runs on after it printed them: three ticks of slack; a loaded
	// machine measured 0.057 s against 0.030 s).
	if c, ok := s.ExitOwnCPU(); !ok || c < 0.8*own-0.03 || c > 1.2*own+0.03 {
		t.Errorf("own exit account %.3fs (%v), the shell's own times %.3fs (%q)", c, ok, own, b)
	}
}
