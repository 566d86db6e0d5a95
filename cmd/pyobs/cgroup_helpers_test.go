//go:build amd64

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// startInCgroup runs `python -c script` (the script prints READY, waits
// for a line on stdin, then does its work), moves it into the cgroup dir,
// lets it go and returns its pid; it is killed at the end of the test,
// before the cgroup is removed (makeV2Cgroup's cleanup was registered
// first, so it runs last).
func startInCgroup(t *testing.T, dir string, py testutil.Interp, script string) int {
	t.Helper()
	argv := append(append([]string{}, py.Argv...), "-c", script)
	c := exec.Command(argv[0], argv[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, _ := c.StdinPipe()
	so, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	readLines(so).expect(t, "READY")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
		t.Fatalf("can't move pid %d into %s: %v", c.Process.Pid, dir, err)
	}
	fmt.Fprintln(in, "go")
	return c.Process.Pid
}
