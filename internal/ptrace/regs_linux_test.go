//go:build amd64

package ptrace

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFrozenRegs: the registers of each stopped thread are the kernel's
// own view of it: /proc/PID/task/TID/syscall ends with the thread's stack
// pointer and pc (read while it is stopped, without ptrace).
func TestFrozenRegs(t *testing.T) {
	pid, tids := freezeTarget(t)
	f, err := Freeze(pid, tids)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		f.Thaw()
		checkThawed(t, pid, tids)
	}()
	for _, tid := range f.Tids {
		regs, err := f.Regs(tid)
		if err != nil {
			t.Fatalf("tid %d: %v", tid, err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", pid, tid))
		if err != nil {
			t.Fatal(err)
		}
		fs := strings.Fields(string(b))
		if len(fs) < 3 {
			t.Fatalf("tid %d: syscall file %q", tid, b)
		}
		sp, _ := strconv.ParseUint(strings.TrimPrefix(fs[len(fs)-2], "0x"), 16, 64)
		pc, _ := strconv.ParseUint(strings.TrimPrefix(fs[len(fs)-1], "0x"), 16, 64)
		if regs.Rsp != sp || regs.Rip != pc {
			t.Errorf("tid %d: rsp 0x%x rip 0x%x, /proc says sp 0x%x pc 0x%x (%q)", tid, regs.Rsp, regs.Rip, sp, pc, b)
		}
	}
	if _, err := f.Regs(tids[0] + 1_000_000); err == nil {
		t.Error("Regs of a thread that is not ours: want an error")
	}
	f.Thaw()
	if _, err := f.Regs(tids[0]); err == nil {
		t.Error("Regs after Thaw: want an error")
	}
}
