package dump

import (
	"github.com/pyobs/pyobs/internal/unwind"
	"golang.org/x/sys/unix"
)

// nativeRegs turns a stopped thread's registers into the unwinder's, and
// its stack pointer.
func nativeRegs(p *unix.PtraceRegs) (unwind.Regs, uint64, error) { return regsOf(p), p.Rsp, nil }

func regsOf(p *unix.PtraceRegs) unwind.Regs {
	return unwind.RegsOf(unwind.GPRs{AX: p.Rax, DX: p.Rdx, CX: p.Rcx, BX: p.Rbx, SI: p.Rsi, DI: p.Rdi, BP: p.Rbp, SP: p.Rsp,
		R8: p.R8, R9: p.R9, R10: p.R10, R11: p.R11, R12: p.R12, R13: p.R13, R14: p.R14, R15: p.R15, IP: p.Rip})
}
