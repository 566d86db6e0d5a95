package dump

import (
	"github.com/pyobs/pyobs/internal/unwind"
	"golang.org/x/sys/unix"
)

// nativeRegs turns a stopped thread's registers into the unwinder's, and
// its stack pointer.
func nativeRegs(p *unix.PtraceRegs) (unwind.Regs, uint64, error) { return regsOf(p), p.Rsp, nil }

func regsOf(p *unix.PtraceRegs) unwind.Regs {
	var r unwind.Regs
	for _, x := range []struct {
		reg int
		v   uint64
	}{{unwind.RegRAX, p.Rax}, {unwind.RegRDX, p.Rdx}, {unwind.RegRCX, p.Rcx}, {unwind.RegRBX, p.Rbx},
		{unwind.RegRSI, p.Rsi}, {unwind.RegRDI, p.Rdi}, {unwind.RegRBP, p.Rbp}, {unwind.RegRSP, p.Rsp},
		{unwind.RegR8, p.R8}, {unwind.RegR8 + 1, p.R9}, {unwind.RegR8 + 2, p.R10}, {unwind.RegR8 + 3, p.R11},
		{unwind.RegR8 + 4, p.R12}, {unwind.RegR8 + 5, p.R13}, {unwind.RegR8 + 6, p.R14}, {unwind.RegR15, p.R15},
		{unwind.RegRA, p.Rip}} {
		r.Set(x.reg, x.v)
	}
	return r
}
