package output

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckNamesTheRealCause: a directory that exists but takes no new
// file (/proc/self: the kernel answers ENOENT to a create) is not reported
// as missing; a directory that is really missing still is.
func TestCheckNamesTheRealCause(t *testing.T) {
	err := Check("/proc/self/x.folded")
	if err == nil {
		t.Fatal("Check(/proc/self/x.folded) passed: /proc takes no new files")
	}
	msg := err.Error()
	t.Log(msg)
	if strings.Contains(msg, "does not exist") || !strings.Contains(msg, "can't create /proc/self/x.folded: no such file or directory") ||
		!strings.Contains(msg, "/proc/self exists") {
		t.Errorf("Check(/proc/self/x.folded): %q; want the create's own error and that /proc/self exists", msg)
	}
	missing := filepath.Join(t.TempDir(), "nope", "x.folded")
	if err := Check(missing); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Check(%s): %v; want the directory named missing", missing, err)
	}
}
