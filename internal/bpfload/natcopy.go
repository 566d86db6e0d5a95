package bpfload

import (
	"fmt"
	"unsafe"

	"github.com/pyobs/pyobs/internal/unwind"
)

// NatMaxBytes is the most user stack one native copy carries (natcopy.h
// NAT_STACK); NatChunk the piece it is read in.
const (
	NatMaxBytes = 16384
	NatChunk    = 1024
	NatLinks    = 32 // NAT_LINKS
)

// NatHead is a native copy's head (natcopy.h struct natrec without its
// stack): the program's key for it, whose it is, the registers; Len stack
// bytes from Sp upward follow.
type NatHead struct {
	Id                                   uint64
	Tid, Len                             uint32
	Tgid, Flags, Kstack, Nlinks          uint32
	Ip, Sp, Bp, Bx, R12, R13, R14, R15   uint64
	Ax, Cx, Dx, Si, Di, R8, R9, R10, R11 uint64
	Links                                [NatLinks]uint64 // kwalk: the Python runs' C-stack links, innermost first
}

var natHdr = int(unsafe.Sizeof(NatHead{}))

// DecodeNat reads one native copy; its stack aliases b.
func DecodeNat(b []byte) (NatHead, []byte, error) {
	h, err := Decode[NatHead](b)
	if err != nil {
		return h, nil, fmt.Errorf("native stack record: %w", err)
	}
	if int(h.Len) > len(b)-natHdr || h.Len > NatMaxBytes || h.Nlinks > NatLinks {
		return h, nil, fmt.Errorf("native stack record of tid %d: %d stack bytes announced, %d present", h.Tid, h.Len, len(b)-natHdr)
	}
	return h, b[natHdr : natHdr+int(h.Len)], nil
}

// Regs are the copy's registers by DWARF number, the sampled pc in the
// return address column.
func (h NatHead) Regs() unwind.Regs {
	return unwind.RegsOf(unwind.GPRs{AX: h.Ax, DX: h.Dx, CX: h.Cx, BX: h.Bx, SI: h.Si, DI: h.Di, BP: h.Bp, SP: h.Sp,
		R8: h.R8, R9: h.R9, R10: h.R10, R11: h.R11, R12: h.R12, R13: h.R13, R14: h.R14, R15: h.R15, IP: h.Ip})
}

// Stack is the copy as the unwinder reads it.
func (h NatHead) Stack(data []byte) unwind.StackCopy { return unwind.StackCopy{Base: h.Sp, Data: data} }
