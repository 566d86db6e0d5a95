//go:build amd64

package procset_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stdinTarget is a process driven through its stdin, read line by line.
type stdinTarget struct {
	pid   int
	in    io.WriteCloser
	lines chan string
}

func startWithStdin(t *testing.T, argv []string) *stdinTarget {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &stdinTarget{pid: cmd.Process.Pid, in: in, lines: make(chan string, 64)}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			tg.lines <- sc.Text()
		}
		close(tg.lines)
	}()
	tg.expect(t, "READY")
	return tg
}

func (s *stdinTarget) send(line string) { _, _ = io.WriteString(s.in, line+"\n") }

func (s *stdinTarget) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("target ended before a %q line", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q line within 30 s", prefix)
		}
	}
}
