package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestCommandCannotRun: every command that takes -- CMD says a command
// that cannot run in one line, "pyobs: cannot run CMD: REASON", with the
// status env(1) and timeout(1) give: 127 when there is no such command
// (a missing path, a name PATH does not hold), 126 when it exists but
// cannot be executed (no execute bit: refused before anything loads; a
// file the kernel will not run: refused at the exec, by the command held
// before its exec, the spawned one and the ptrace engine's).
func TestCommandCannotRun(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	noExec := filepath.Join(dir, "plain.py")
	if err := os.WriteFile(noExec, []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badFormat := filepath.Join(dir, "garbage")
	if err := os.WriteFile(badFormat, []byte("\x01\x02\x03 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := "/nonexistent/pyobs-no-such-cmd"
	cmds := [][]string{
		{"record", "-o", filepath.Join(dir, "x.svg")}, {"offcpu"}, {"dump"}, {"stat"}, {"trace"},
		{"trace", "--engine", "ptrace", "--children=false"}, {"red"}, {"mem"}, {"diagnose"},
	}
	for _, c := range cmds {
		name := strings.Join(c, " ")
		for _, x := range []struct {
			argv0, reason string
			code          int
		}{
			{missing, "no such file or directory", 127},
			{"pyobs-no-such-cmd-in-path", "command not found in PATH", 127},
			{noExec, "permission denied", 126},
		} {
			r := testutil.Run(t, time.Minute, append(append([]string{}, c...), "--", x.argv0, "arg")...)
			t.Run(name+" "+filepath.Base(x.argv0), func(t *testing.T) {
				oneLineError(t, r, x.code, "pyobs: cannot run "+x.argv0+": "+x.reason)
			})
		}
	}
	// Found and executable, refused by the kernel at the exec (ENOEXEC).
	for _, c := range [][]string{{"record", "-o", filepath.Join(dir, "y.svg")}, {"dump"}, {"trace", "--engine", "ptrace", "--children=false"}} {
		r := testutil.Run(t, time.Minute, append(append([]string{}, c...), "--", badFormat)...)
		t.Run(strings.Join(c, " ")+" exec format", func(t *testing.T) {
			oneLineError(t, r, 126, "pyobs: cannot run "+badFormat+": exec format error")
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "y.svg")); err == nil {
		t.Error("record wrote a profile of a command that never ran")
	}
}
