package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// A program that writes its pid to a file, then spins: what pyobs spawns
// with -- CMD in the interrupt tests.
const spinPidScript = `import os, sys
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
x = 0
while True:
    x += 1
`

// TestInterruptEndsCommand: pyobs told to stop (SIGTERM sent to pyobs
// alone, or SIGINT) while it observes a program it spawned passes the
// signal on to the program: the program is gone within a moment (not
// after a grace of seconds, never left running), pyobs exits with the
// program's status (128+signal), and its output is complete. dump,
// interrupted before its --after, says so in one line.
func TestInterruptEndsCommand(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.CPUHog(t, 1)
	dir := t.TempDir()
	script := filepath.Join(dir, "spin.py")
	if err := os.WriteFile(script, []byte(spinPidScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		sig   syscall.Signal
		args  []string
		check func(t *testing.T, stdout, stderr, out string)
	}{
		{"record", syscall.SIGTERM, []string{"record", "-d", "60s", "-o", "OUT.folded"}, checkFolded},
		{"record-int", syscall.SIGINT, []string{"record", "-d", "60s", "-o", "OUT.folded"}, checkFolded},
		{"trace", syscall.SIGTERM, []string{"trace", "-d", "60s", "--format", "json", "-o", "OUT.json"}, checkJSON},
		{"trace-ptrace", syscall.SIGTERM, []string{"trace", "--engine", "ptrace", "-d", "60s", "--format", "json", "-o", "OUT.json"}, checkJSON},
		{"stat", syscall.SIGTERM, []string{"stat", "--format", "json", "-o", "OUT.json"}, checkJSON},
		{"offcpu", syscall.SIGTERM, []string{"offcpu", "-d", "60s", "-o", "OUT.folded"}, nil},
		{"dump", syscall.SIGTERM, []string{"dump", "--after", "60s"}, checkDumpInterrupted},
		{"dump-int", syscall.SIGINT, []string{"dump", "--after", "60s"}, checkDumpInterrupted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pidFile := filepath.Join(dir, c.name+".pid")
			var args []string
			out := ""
			for _, a := range c.args {
				if strings.HasPrefix(a, "OUT") {
					a = filepath.Join(dir, c.name+strings.TrimPrefix(a, "OUT"))
					out = a
				}
				args = append(args, a)
			}
			args = append(append(append(args, "--"), in.Argv...), script, pidFile)
			cmd := exec.Command(testutil.Binary(t), args...)
			// Its own process group: never the terminal's foreground one,
			// where a SIGINT is taken for a Ctrl-C that reached the
			// program already (not sent twice).
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() { _ = cmd.Process.Kill(); <-done }()
			pid := waitPidFile(t, pidFile, done, &se)
			defer syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(1500 * time.Millisecond) // the observation is under way
			sent := time.Now()
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("pyobs did not end within 30 s of %v\nstderr: %s", c.sig, se.String())
			}
			took := time.Since(sent)
			if alive(pid) {
				t.Fatalf("the spawned program (pid %d) still runs after pyobs ended", pid)
			}
			// The signal is passed on at once: the program (which does
			// not catch it) ends within a moment, well before the grace.
			if took > 3*time.Second {
				t.Errorf("pyobs took %v to end after %v: the program was not given the signal", took, c.sig)
			}
			if want := 128 + int(c.sig); cmd.ProcessState.ExitCode() != want {
				t.Errorf("exit status %d, want %d (128+%d)\nstderr: %s", cmd.ProcessState.ExitCode(), want, c.sig, se.String())
			}
			if c.check != nil {
				c.check(t, so.String(), se.String(), out)
			}
		})
	}
}

func waitPidFile(t *testing.T, path string, done chan struct{}, se *bytes.Buffer) int {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("pyobs ended before the program started\nstderr: %s", se.String())
		default:
		}
		b, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("the program did not write its pid")
	return 0
}

// alive: the pid exists and is not a zombie (ours: pyobs's child, reaped
// by pyobs, or reparented to init and reaped there).
func alive(pid int) bool {
	st := testutil.ProcStatus(pid)
	return st != nil && !strings.HasPrefix(st["State"], "Z")
}

func checkFolded(t *testing.T, _, _, out string) {
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no output file: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("empty profile")
	}
	for _, l := range lines {
		i := strings.LastIndexByte(l, ' ')
		if n, err := strconv.Atoi(l[i+1:]); i < 0 || err != nil || n <= 0 {
			t.Fatalf("bad folded line %q", l)
		}
	}
	if !strings.Contains(string(b), "spin.py") {
		t.Errorf("the profile has no frame of the program:\n%s", b)
	}
}

func checkJSON(t *testing.T, _, _, out string) {
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no output file: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("output is not one JSON document: %v", err)
	}
}

func checkDumpInterrupted(t *testing.T, stdout, stderr, _ string) {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "pyobs: interrupted by SIG") || !strings.Contains(last, "before the dump") || !strings.Contains(last, "was ended") {
		t.Errorf("want one line saying the dump was interrupted and the program ended, got %q", last)
	}
	if strings.Contains(stderr, "context canceled") {
		t.Errorf("raw Go error on stderr: %s", stderr)
	}
	if strings.TrimSpace(stdout) != "" && strings.Contains(stdout, "Thread ") {
		t.Errorf("a dump was printed though it was interrupted before it: %s", stdout)
	}
}

// TestKilledObserverEndsCommand: pyobs killed with SIGKILL (nothing of it
// runs after) while it observes a program it spawned: the program dies
// with it (the kernel's parent-death signal), whether it was held before
// its exec (record, trace) or spawned as it runs (stat).
func TestKilledObserverEndsCommand(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	script := filepath.Join(dir, "spin.py")
	if err := os.WriteFile(script, []byte(spinPidScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{"record", "-o", filepath.Join(dir, "r.folded")}, {"trace"}, {"stat"}, {"dump", "--after", "60s"}} {
		t.Run(c[0], func(t *testing.T) {
			pidFile := filepath.Join(dir, c[0]+".pid")
			args := append(append(append(append([]string{}, c...), "--"), in.Argv...), script, pidFile)
			cmd := exec.Command(testutil.Binary(t), args...)
			var se bytes.Buffer
			cmd.Stderr = &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			pid := waitPidFile(t, pidFile, done, &se)
			defer syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(500 * time.Millisecond) // the observation is under way
			_ = cmd.Process.Kill()
			<-done
			for end := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the spawned program (pid %d) outlived pyobs killed by SIGKILL", pid)
				}
			}
		})
	}
}
