package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestRecordLastSamplesNamed: a program that exits while busy keeps the
// names of its last samples, which pyobs names after the exit. On
// 3.10/3.11 (no code-object generation: names re-checked by age) a name
// older than the re-check age was read again once the process was gone,
// and its samples came out `[unreadable: process exited]`: 6–9 % of a
// 2 s phase that had been named all along. Now ≤ 1 % may be unnamed
// (a starved pyobs that did not re-check in time), beside a CPU hog.
func TestRecordLastSamplesNamed(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	script := filepath.Join(testutil.Repo(), "testdata", "targets", "record_tail.py")
	for _, label := range []string{"pyenv-3.10", "pyenv-3.11"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			f := filepath.Join(t.TempDir(), "t.folded")
			argv := append([]string{"record", "-F", "999", "-o", f, "--"}, py.Argv...)
			r := testutil.RunCmd(t, 60*time.Second, exec.Command(testutil.Binary(t), append(argv, script, "0.1", "2")...))
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			stacks, weights := readFoldedStacks(t, f)
			var all, last, unread int64
			for i, s := range stacks {
				all += weights[i]
				joined := strings.Join(s, ";")
				switch {
				case strings.Contains(joined, "[unreadable"):
					unread += weights[i]
				case strings.Contains(joined, ";last (") && strings.Contains(joined, "record_tail.py:"):
					last += weights[i]
				}
			}
			t.Logf("%s: %d samples, %d in last(), %d unreadable", label, all, last, unread)
			if last < all/2 {
				t.Fatalf("%d of %d samples in last(): the program's last phase was not recorded\n%s", last, all, r.Stderr)
			}
			if unread*100 > all {
				t.Errorf("%d of %d samples unreadable (want ≤ 1 %%): names lost as the program exited\n%s", unread, all, r.Stderr)
			}
		})
	}
}
