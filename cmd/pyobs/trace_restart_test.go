package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// A read interrupted by a signal whose handler raises (the program gets
// EINTR: nothing restarts it), then a poll interrupted by a SIGWINCH it
// ignores (the kernel restarts it: restart_syscall), then a sleep
// interrupted the same way (restarted as itself: an absolute
// clock_nanosleep).
const restartScript = `import os, signal, select, threading, time
r, w = os.pipe()
class Alarm(Exception): pass
def h(*a): raise Alarm()
signal.signal(signal.SIGALRM, h)
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    os.read(r, 1)
except Alarm:
    pass
main = threading.get_ident()
threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGWINCH)).start()
p = select.poll(); p.register(r, select.POLLIN)
p.poll(1000)
threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGWINCH)).start()
time.sleep(1)
`

// TestTracePtraceRestarts: under ptrace, a call the kernel restarts is
// one call, timed from its first entry (the sleep: ~1 s, not its last
// 0.7 s), and an interrupted call the program saw fail is not taken for
// the next restart (with -e read under seccomp, the poll's
// restart_syscall was counted as a 1.2 s read).
func TestTracePtraceRestarts(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	script := filepath.Join(t.TempDir(), "rs.py")
	if err := os.WriteFile(script, []byte(restartScript), 0o644); err != nil {
		t.Fatal(err)
	}
	maxUS := func(t *testing.T, args ...string) map[string]float64 {
		out := filepath.Join(t.TempDir(), "t.json")
		r := testutil.Run(t, time.Minute, append(append(append([]string{"trace", "--engine", "ptrace", "--format", "json", "-o", out}, args...), "--"), append(append([]string{}, py.Argv...), script)...)...)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var doc struct {
			Syscalls []struct {
				Name  string  `json:"name"`
				MaxUS float64 `json:"max_us"`
			} `json:"syscalls"`
		}
		b, _ := os.ReadFile(out)
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		m := map[string]float64{}
		for _, s := range doc.Syscalls {
			m[s.Name] = s.MaxUS
		}
		return m
	}
	t.Run("seccomp", func(t *testing.T) {
		if m := maxUS(t, "-e", "read"); m["read"] > 500e3 {
			t.Errorf("a read of %.0f µs: the poll's restart taken for the interrupted read (%v)", m["read"], m)
		}
	})
	t.Run("all", func(t *testing.T) {
		m := maxUS(t)
		if m["clock_nanosleep"] < 900e3 || m["read"] > 500e3 {
			t.Errorf("sleep(1) timed %.0f µs (want ≥ 0.9 s, from its first entry), read %.0f µs: %v", m["clock_nanosleep"], m["read"], m)
		}
	})
}
