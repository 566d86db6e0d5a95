package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// A target whose function, file, thread and local names carry what a
// terminal acts on (escape sequences, BEL, a newline, a bidi override).
const hostileNames = `import ctypes, threading, time
ctypes.CDLL(None).prctl(15, b"comm\x1b[2J\x07", 0, 0, 0)  # PR_SET_NAME: the main thread's comm
def work(v):
    time.sleep(600)
code = work.__code__.replace(co_name="evil\x1b]0;pwned\x07\x1b[2J", co_qualname="evil\x1b]0;pwned\x07\x1b[2J",
                             co_filename="/x/\x1b[31mred\u202e.py")
work.__code__ = code
t = threading.Thread(target=work, args=("v\x1b[5m\nnew line",), name="th\x1b[31mred\x07")
t.start()
time.sleep(0.2)
print("READY", flush=True)
time.sleep(600)
`

// TestHostileNamesEscaped: nothing the target names reaches the reader's
// terminal as a control character: dump (with locals), offcpu and record
// text and folded output carry the names escaped (\x1b, \u202e); stat
// the threads' comm.
func TestHostileNamesEscaped(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), hostileNames, nil)
	pid := strconv.Itoa(tg.Pid)
	for _, args := range [][]string{
		{"dump", "--locals"},
		{"offcpu", "-d", "500ms"},
		{"offcpu", "-d", "500ms", "--format", "folded", "--threads"},
		{"record", "--mode", "wall", "-d", "500ms", "--format", "folded", "--threads"},
		{"stat", "-d", "300ms"},
	} {
		r := testutil.Run(t, time.Minute, append(args, "-p", pid)...)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.Code, r.Stderr)
		}
		for _, bad := range []string{"\x1b", "\x07", "\u202e"} {
			if strings.Contains(r.Stdout, bad) || strings.Contains(r.Stderr, bad) {
				t.Errorf("%v: %q reached the output:\n%s", args, bad, r.Stdout)
			}
		}
		// (folded output writes a label's ';' as ':')
		if args[0] == "stat" {
			if !strings.Contains(r.Stdout, `comm\x1b[2J\x07`) {
				t.Errorf("stat: the comm is not there, escaped:\n%s", r.Stdout)
			}
			continue
		}
		if !strings.Contains(r.Stdout, `evil\x1b]0`) || !strings.Contains(r.Stdout, `pwned\x07\x1b[2J`) || !strings.Contains(r.Stdout, `red\u202e.py`) {
			t.Errorf("%v: the function's name is not there, escaped:\n%s", args, r.Stdout)
		}
	}
}
