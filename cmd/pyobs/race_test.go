package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestRaceInProcess runs each command in this process (run(), not the
// binary), so that `go test -race -run RaceInProcess` (make lint) checks
// the goroutines of the CLI, the session (spawn, wait), ptrace (the
// freeze thread) and the recorders against a target that churns threads.
func TestRaceInProcess(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg, err := startChaos(t, in)
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(tg.pid)
	dir := t.TempDir()
	py := in.Argv
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"dump", []string{"dump", "-p", pid}, 0},
		{"dump-lock", []string{"dump", "--lock", "--format", "json", "-p", pid}, 0},
		{"record-cpu", []string{"record", "-F", "997", "-d", "700ms", "--threads", "-p", pid}, 0},
		{"record-wall", []string{"record", "--mode", "wall", "-F", "499", "-d", "400ms", "-p", pid}, 0},
		{"record-gil", []string{"record", "--mode", "gil", "-F", "499", "-d", "300ms", "-p", pid}, 0},
		{"stat", []string{"stat", "-d", "300ms", "--format", "json", "-p", pid}, 0},
		{"stat-live", []string{"stat", "-i", "100ms", "-d", "350ms", "--format", "json", "-p", pid}, 0},
		// Held before its exec while the walker loads (the test binary is
		// the holder: TestMain), then sampled from its first instruction.
		{"record-spawn", append([]string{"record", "-F", "499", "--"}, append(append([]string{}, py...), "-c", "import sys,time\nt=time.monotonic()+0.4\nwhile time.monotonic()<t: pass\nsys.exit(3)")...), 3},
		{"dump-spawn", append([]string{"dump", "--after", "100ms", "--kill", "--"}, append(append([]string{}, py...), "-c", "import time\ntime.sleep(30)")...), 0},
		{"stat-spawn", append([]string{"stat", "--"}, append(append([]string{}, py...), "-c", "import time\ntime.sleep(0.3)")...), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, c.name+".out")
			args := append([]string{"--format", formatFor(c.args[0]), "-o", out}, c.args...)
			if code := run(args); code != c.code {
				t.Errorf("pyobs %v: exit %d, want %d", c.args, code, c.code)
			}
			if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
				t.Errorf("pyobs %v: no output: %v", c.args, err)
			}
		})
	}
	if p := tg.waitHealthy(500 * time.Millisecond); len(p) > 0 {
		t.Errorf("target harmed: %v", p)
	}
	for _, l := range tg.takeBad() {
		t.Logf("target saw: %s", l) // epoll_wait EINTR under --lock: TestPtraceEpollEINTR
	}
}

func formatFor(cmd string) string {
	if cmd == "record" {
		return "folded"
	}
	return "json"
}
