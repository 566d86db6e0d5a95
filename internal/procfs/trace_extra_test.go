package procfs

import (
	"os"
	"testing"
)

func TestStatusFieldsSelf(t *testing.T) {
	f := Default()
	if got := f.StatusInt(os.Getpid(), "Tgid"); got != os.Getpid() {
		t.Errorf("Tgid %d, want %d", got, os.Getpid())
	}
	if got := f.StatusInt(os.Getpid(), "PPid"); got != os.Getppid() {
		t.Errorf("PPid %d, want %d", got, os.Getppid())
	}
	if got := f.StatusInt(os.Getpid(), "NoSuchField"); got != -1 {
		t.Errorf("missing field: %d, want -1", got)
	}
	// The Go runtime has a handler for SIGURG (23): bit 22.
	if m := f.SigCaught(os.Getpid()); m&(1<<22) == 0 {
		t.Errorf("SigCgt %#x: SIGURG not caught", m)
	}
	if got := f.StatusInt(1<<30, "Tgid"); got != -1 {
		t.Errorf("no such task: %d, want -1", got)
	}
}
