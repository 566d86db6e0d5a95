package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Regs are the registers known in one frame, by DWARF number.
type Regs struct {
	V    [NumRegs]uint64
	Have uint32 // bit r set: V[r] is known
}

// Set records a known register value.
func (r *Regs) Set(reg int, v uint64) { r.V[reg], r.Have = v, r.Have|1<<reg }

func (r *Regs) get(reg uint8) (uint64, bool) {
	if reg >= NumRegs || r.Have&(1<<reg) == 0 {
		return 0, false
	}
	return r.V[reg], true
}

// StackCopy is the user stack as the kernel copied it into the sample:
// Data holds the bytes from Base (the sampled rsp) upward.
type StackCopy struct {
	Base uint64
	Data []byte
}

// U64 reads 8 bytes at addr; false when any of them lies outside the copy.
func (s StackCopy) U64(addr uint64) (uint64, bool) {
	if addr < s.Base || addr-s.Base > uint64(len(s.Data)) || uint64(len(s.Data))-(addr-s.Base) < 8 {
		return 0, false
	}
	o := addr - s.Base
	return binary.LittleEndian.Uint64(s.Data[o:]), true
}

// Why an unwind step stopped.
var (
	ErrOutermost   = errors.New("outermost frame (return address undefined)")
	ErrOutsideCopy = errors.New("read outside the copied stack")
	ErrNoRegister  = errors.New("rule needs a register that is not known")
	ErrBadExpr     = errors.New("unsupported DWARF expression")
)

const maxExprStack = 64

// evalExpr evaluates a DWARF expression (the subset CFI uses on x86_64:
// PLT entries compute rsp+8+((rip&15)>=11)*8). push is the initial stack.
func evalExpr(expr []byte, regs *Regs, mem StackCopy, push ...uint64) (uint64, error) {
	var st [maxExprStack]uint64
	n := copy(st[:], push)
	c := &cursor{b: expr}
	pop := func() uint64 {
		if n == 0 {
			c.fail("expression stack underflow")
			return 0
		}
		n--
		return st[n]
	}
	pushv := func(v uint64) {
		if n == maxExprStack {
			c.fail("expression stack overflow")
			return
		}
		st[n] = v
		n++
	}
	for c.off < len(c.b) && c.err == nil {
		op := c.u8()
		switch {
		case op >= 0x30 && op <= 0x4f: // lit0..31
			pushv(uint64(op - 0x30))
			continue
		case op >= 0x50 && op <= 0x6f: // reg0..31
			v, ok := regs.get(op - 0x50)
			if !ok {
				return 0, ErrNoRegister
			}
			pushv(v)
			continue
		case op >= 0x70 && op <= 0x8f: // breg0..31 sleb
			v, ok := regs.get(op - 0x70)
			off := c.sleb()
			if !ok {
				return 0, ErrNoRegister
			}
			pushv(v + uint64(off))
			continue
		}
		switch op {
		case 0x06: // deref
			v, ok := mem.U64(pop())
			if !ok {
				return 0, ErrOutsideCopy
			}
			pushv(v)
		case 0x08:
			pushv(uint64(c.u8()))
		case 0x09:
			pushv(uint64(int64(int8(c.u8()))))
		case 0x0a:
			pushv(uint64(c.u16()))
		case 0x0b:
			pushv(uint64(int64(int16(c.u16()))))
		case 0x0c:
			pushv(uint64(c.u32()))
		case 0x0d:
			pushv(uint64(int64(int32(c.u32()))))
		case 0x0e, 0x0f:
			pushv(c.u64())
		case 0x10:
			pushv(c.uleb())
		case 0x11:
			pushv(uint64(c.sleb()))
		case 0x12: // dup
			v := pop()
			pushv(v)
			pushv(v)
		case 0x13: // drop
			pop()
		case 0x14: // over
			a, b := pop(), pop()
			pushv(b)
			pushv(a)
			pushv(b)
		case 0x16: // swap
			a, b := pop(), pop()
			pushv(a)
			pushv(b)
		case 0x1f: // neg
			pushv(-pop())
		case 0x23: // plus_uconst
			pushv(pop() + c.uleb())
		case 0x96: // nop
		case 0x1a, 0x1c, 0x1e, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e:
			b, a := pop(), pop()
			pushv(binop(op, a, b))
		default:
			return 0, fmt.Errorf("%w: opcode 0x%x", ErrBadExpr, op)
		}
	}
	if c.err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadExpr, c.err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: empty result", ErrBadExpr)
	}
	return st[n-1], nil
}

func binop(op byte, a, b uint64) uint64 {
	bool64 := func(x bool) uint64 {
		if x {
			return 1
		}
		return 0
	}
	switch op {
	case 0x1a:
		return a & b
	case 0x1c:
		return a - b
	case 0x1e:
		return a * b
	case 0x21:
		return a | b
	case 0x22:
		return a + b
	case 0x24:
		return a << (b & 63)
	case 0x25:
		return a >> (b & 63)
	case 0x26:
		return uint64(int64(a) >> (b & 63))
	case 0x27:
		return a ^ b
	case 0x29:
		return bool64(a == b)
	case 0x2a:
		return bool64(int64(a) >= int64(b))
	case 0x2b:
		return bool64(int64(a) > int64(b))
	case 0x2c:
		return bool64(int64(a) <= int64(b))
	case 0x2d:
		return bool64(int64(a) < int64(b))
	}
	return bool64(a != b) // 0x2e ne
}

// Step applies row to the registers of one frame and returns the caller's.
// The caller's rsp is the CFA and its rip the return address column.
func Step(row *Row, regs *Regs, mem StackCopy) (Regs, error) {
	var cfa uint64
	if row.CFAExpr != nil {
		v, err := evalExpr(row.CFAExpr, regs, mem)
		if err != nil {
			return Regs{}, err
		}
		cfa = v
	} else {
		v, ok := regs.get(row.CFAReg)
		if !ok {
			return Regs{}, ErrNoRegister
		}
		cfa = v + uint64(row.CFAOff)
	}
	out := *regs
	for r := 0; r < NumRegs; r++ {
		rule := &row.Regs[r]
		switch rule.Kind {
		case RuleSame:
			continue
		case RuleUndefined:
			out.Have &^= 1 << r
		case RuleOffset:
			v, ok := mem.U64(cfa + uint64(rule.Off))
			if !ok {
				if r == RegRA {
					return Regs{}, ErrOutsideCopy
				}
				out.Have &^= 1 << r
				continue
			}
			out.Set(r, v)
		case RuleValOffset:
			out.Set(r, cfa+uint64(rule.Off))
		case RuleRegister:
			v, ok := regs.get(rule.Reg)
			if !ok {
				out.Have &^= 1 << r
				continue
			}
			out.Set(r, v)
		case RuleExpr, RuleValExpr:
			v, err := evalExpr(rule.Expr, regs, mem, cfa)
			if err == nil && rule.Kind == RuleExpr {
				var ok bool
				if v, ok = mem.U64(v); !ok {
					err = ErrOutsideCopy
				}
			}
			if err != nil {
				if r == RegRA {
					return Regs{}, err
				}
				out.Have &^= 1 << r
				continue
			}
			out.Set(r, v)
		}
	}
	if out.Have&(1<<RegRA) == 0 {
		return Regs{}, ErrOutermost
	}
	out.Set(RegRSP, cfa)
	return out, nil
}

// GPRs are x86_64's general registers and rip by name, as a stopped
// thread's or a probe's copy has them.
type GPRs struct {
	AX, DX, CX, BX, SI, DI, BP, SP       uint64
	R8, R9, R10, R11, R12, R13, R14, R15 uint64
	IP                                   uint64
}

// RegsOf numbers g as DWARF does (rip in the return address column: the
// leaf's pc), every register known.
func RegsOf(g GPRs) Regs {
	return Regs{V: [NumRegs]uint64{g.AX, g.DX, g.CX, g.BX, g.SI, g.DI, g.BP, g.SP,
		g.R8, g.R9, g.R10, g.R11, g.R12, g.R13, g.R14, g.R15, g.IP}, Have: 1<<NumRegs - 1}
}
