package ptrace

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Regs reads the registers of one of the stopped threads
// (PTRACE_GETREGS, issued from the thread that seized it, as ptrace
// requires).
func (f *Frozen) Regs(tid int) (unix.PtraceRegs, error) {
	var regs unix.PtraceRegs
	if f == nil || f.thawed {
		return regs, errors.New("threads are not stopped")
	}
	var err error
	done := make(chan struct{})
	f.reqs <- func() {
		err = unix.PtraceGetRegs(tid, &regs)
		close(done)
	}
	<-done
	if err != nil {
		return regs, fmt.Errorf("can't PTRACE_GETREGS pid %d tid %d: %w", f.Pid, tid, err)
	}
	return regs, nil
}
