//go:build !amd64

package dump

import (
	"github.com/pyobs/pyobs/internal/unwind"
	"golang.org/x/sys/unix"
)

// nativeRegs: the unwinder knows x86_64's registers and CFI only.
func nativeRegs(p *unix.PtraceRegs) (unwind.Regs, uint64, error) {
	return unwind.Regs{}, 0, unwind.ErrArch
}
