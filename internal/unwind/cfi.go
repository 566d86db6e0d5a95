package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// DWARF register numbers of x86_64 (System V psABI, figure 3.36).
const (
	RegRAX = 0
	RegRDX = 1
	RegRCX = 2
	RegRBX = 3
	RegRSI = 4
	RegRDI = 5
	RegRBP = 6
	RegRSP = 7
	RegR8  = 8
	RegR15 = 15
	RegRA  = 16 // the return address column: the caller's rip
	// NumRegs is the number of registers the unwinder tracks.
	NumRegs = 17
)

// Rule kinds: how to recover a register of the caller.
const (
	RuleSame      = iota // unchanged (the default for every register)
	RuleUndefined        // not recoverable (the return address of the outermost frame)
	RuleOffset           // saved at CFA+Off
	RuleValOffset        // the value is CFA+Off
	RuleRegister         // held in register Reg
	RuleExpr             // saved at the address the expression computes (CFA pushed first)
	RuleValExpr          // the value the expression computes (CFA pushed first)
)

// Rule recovers one register.
type Rule struct {
	Kind uint8
	Reg  uint8
	Off  int64
	Expr []byte // aliases the .eh_frame data
}

// Row is the CFA rule and the register rules in force at one address.
type Row struct {
	CFAReg  uint8
	CFAOff  int64
	CFAExpr []byte // non-nil: the CFA is this expression's value
	Regs    [NumRegs]Rule
}

// FormatError says where in .eh_frame (or its header) parsing failed.
type FormatError struct {
	Off int
	Msg string
}

func (e *FormatError) Error() string { return fmt.Sprintf("eh_frame: offset 0x%x: %s", e.Off, e.Msg) }

// ErrNoFDE: no FDE covers the address (code without CFI).
var ErrNoFDE = errors.New("no FDE covers the address")

func ferr(off int, format string, a ...any) error {
	return &FormatError{Off: off, Msg: fmt.Sprintf(format, a...)}
}

// Pointer encodings (DW_EH_PE_*).
const (
	peAbsptr  = 0x00
	peUleb    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peOmit    = 0xff
)

// cursor reads a byte slice; every read is bounds-checked and a failed
// read sets err, so parsers check once at the end of a step.
type cursor struct {
	b   []byte
	off int
	err error
}

func (c *cursor) fail(msg string) {
	if c.err == nil {
		c.err = ferr(c.off, "%s", msg)
	}
	c.off = len(c.b)
}

func (c *cursor) u8() uint8 {
	if c.off >= len(c.b) {
		c.fail("truncated")
		return 0
	}
	c.off++
	return c.b[c.off-1]
}

func (c *cursor) bytes(n uint64) []byte {
	if n > uint64(len(c.b)-c.off) {
		c.fail("truncated block")
		return nil
	}
	s := c.b[c.off : c.off+int(n)]
	c.off += int(n)
	return s
}

func (c *cursor) u16() uint16 {
	b := c.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (c *cursor) u32() uint32 {
	b := c.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (c *cursor) u64() uint64 {
	b := c.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (c *cursor) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := c.u8()
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 || c.err != nil {
			return v
		}
	}
}

func (c *cursor) sleb() int64 {
	var v int64
	var shift uint
	var b byte
	for {
		b = c.u8()
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 || c.err != nil {
			break
		}
	}
	if shift < 64 && b&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

// ptr reads a pointer in encoding enc; base is the address of the data
// (for pcrel), dataBase that of .eh_frame_hdr (for datarel).
func (c *cursor) ptr(enc byte, base, dataBase uint64) uint64 {
	at := base + uint64(c.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = c.u64()
	case peUleb:
		v = c.uleb()
	case peUdata2:
		v = uint64(c.u16())
	case peSdata2:
		v = uint64(int64(int16(c.u16())))
	case peUdata4:
		v = uint64(c.u32())
	case peSdata4:
		v = uint64(int64(int32(c.u32())))
	case peSleb:
		v = uint64(c.sleb())
	default:
		c.fail(fmt.Sprintf("pointer encoding 0x%x", enc))
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += at
	case peDatarel:
		v += dataBase
	default:
		c.fail(fmt.Sprintf("pointer application 0x%x", enc&0x70))
	}
	return v
}

// CIE is a parsed common information entry.
type CIE struct {
	CodeAlign uint64
	DataAlign int64
	RA        uint64
	Enc       byte // FDE pointer encoding ('R')
	Signal    bool // 'S': frames of this CIE are signal handlers
	aug       bool // 'z': FDEs carry augmentation data
	Init      []byte
}

// FDE is a parsed frame description entry: the code [Start, End) and its
// CFA instructions.
type FDE struct {
	CIE        *CIE
	Start, End uint64
	Insns      []byte
}

// EHFrame is one file's .eh_frame with its .eh_frame_hdr search table
// (or, when the header is absent or unusual, a table built by scanning).
type EHFrame struct {
	data    []byte
	addr    uint64 // virtual address of data
	hdr     []byte // the search table: 8-byte entries {int32 pc, int32 fde} relative to hdrAddr
	hdrAddr uint64
	scanned []fdeIndex
	cies    map[int]*CIE
	maxCIEs int
}

type fdeIndex struct {
	start uint64
	off   int
}

// NewEHFrame prepares lookups in data (the .eh_frame section, loaded at
// addr) using hdr (.eh_frame_hdr at hdrAddr; nil to scan data instead).
func NewEHFrame(data []byte, addr uint64, hdr []byte, hdrAddr uint64) (*EHFrame, error) {
	e := &EHFrame{data: data, addr: addr, cies: map[int]*CIE{}, maxCIEs: 4096}
	if hdr != nil {
		if tab, err := hdrTable(hdr, hdrAddr); err == nil {
			e.hdr, e.hdrAddr = tab, hdrAddr
			return e, nil
		}
	}
	if err := e.scan(); err != nil {
		return nil, err
	}
	return e, nil
}

// hdrTable returns the binary-search table of .eh_frame_hdr when it is
// the usual datarel|sdata4 one, as a slice of whole 8-byte entries.
func hdrTable(hdr []byte, hdrAddr uint64) ([]byte, error) {
	c := &cursor{b: hdr}
	if v := c.u8(); v != 1 {
		return nil, ferr(0, "eh_frame_hdr version %d", v)
	}
	ptrEnc, cntEnc, tabEnc := c.u8(), c.u8(), c.u8()
	if ptrEnc != peOmit {
		c.ptr(ptrEnc, hdrAddr, hdrAddr)
	}
	if cntEnc == peOmit || tabEnc != peDatarel|peSdata4 {
		return nil, ferr(c.off, "no sdata4 search table (encoding 0x%x)", tabEnc)
	}
	n := c.ptr(cntEnc, hdrAddr, hdrAddr)
	if c.err != nil {
		return nil, c.err
	}
	if n > uint64(len(hdr)-c.off)/8 {
		return nil, ferr(c.off, "%d table entries in %d bytes", n, len(hdr)-c.off)
	}
	return hdr[c.off : c.off+int(n)*8], nil
}

// scan walks every entry of .eh_frame and builds a sorted table of FDEs.
func (e *EHFrame) scan() error {
	for off := 0; off < len(e.data); {
		length, body, next, err := e.entry(off)
		if err != nil {
			return err
		}
		if length == 0 {
			break // terminator
		}
		if id := binary.LittleEndian.Uint32(e.data[body:]); id != 0 {
			if f, err := e.fdeAt(off); err == nil {
				e.scanned = append(e.scanned, fdeIndex{f.Start, off})
			}
		}
		off = next
	}
	sort.Slice(e.scanned, func(i, j int) bool { return e.scanned[i].start < e.scanned[j].start })
	return nil
}

// entry reads the length of the entry at off: body is the offset of its
// CIE id/pointer field, next that of the following entry.
func (e *EHFrame) entry(off int) (length uint64, body, next int, err error) {
	c := &cursor{b: e.data, off: off}
	length = uint64(c.u32())
	if length == 0xffffffff {
		length = c.u64()
	}
	if c.err != nil {
		return 0, 0, 0, c.err
	}
	if length == 0 {
		return 0, c.off, c.off, nil
	}
	if length < 4 || length > uint64(len(e.data)-c.off) {
		return 0, 0, 0, ferr(off, "entry length %d exceeds the section", length)
	}
	return length, c.off, c.off + int(length), nil
}

// cieAt parses (once) the CIE at off.
func (e *EHFrame) cieAt(off int) (*CIE, error) {
	if c, ok := e.cies[off]; ok {
		return c, nil
	}
	_, body, next, err := e.entry(off)
	if err != nil {
		return nil, err
	}
	c := &cursor{b: e.data[:next], off: body}
	if c.u32() != 0 {
		return nil, ferr(off, "not a CIE")
	}
	ci := &CIE{Enc: peAbsptr}
	ver := c.u8()
	if ver != 1 && ver != 3 {
		return nil, ferr(off, "CIE version %d", ver)
	}
	augStart := c.off
	for c.u8() != 0 && c.err == nil {
	}
	aug := string(e.data[augStart:max(augStart, c.off-1)])
	if len(aug) >= 2 && aug[:2] == "eh" {
		c.u64()
		aug = aug[2:]
	}
	ci.CodeAlign = c.uleb()
	ci.DataAlign = c.sleb()
	if ver == 1 {
		ci.RA = uint64(c.u8())
	} else {
		ci.RA = c.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		ci.aug = true
		n := c.uleb()
		d := &cursor{b: c.bytes(n)}
		for _, a := range aug[1:] {
			switch a {
			case 'R':
				ci.Enc = d.u8()
			case 'L':
				d.u8()
			case 'P':
				enc := d.u8()
				d.ptr(enc&^0x80, 0, 0) // the personality routine: not needed
			case 'S':
				ci.Signal = true
			}
		}
	} else if aug != "" {
		return nil, ferr(off, "augmentation %q without 'z'", aug)
	}
	if c.err != nil {
		return nil, c.err
	}
	ci.Init = e.data[c.off:next]
	if len(e.cies) < e.maxCIEs {
		e.cies[off] = ci
	}
	return ci, nil
}

// fdeAt parses the FDE at off.
func (e *EHFrame) fdeAt(off int) (FDE, error) {
	_, body, next, err := e.entry(off)
	if err != nil {
		return FDE{}, err
	}
	c := &cursor{b: e.data[:next], off: body}
	ptr := c.u32()
	if ptr == 0 || uint64(ptr) > uint64(body) {
		return FDE{}, ferr(off, "FDE with CIE pointer %d", ptr)
	}
	ci, err := e.cieAt(body - int(ptr))
	if err != nil {
		return FDE{}, err
	}
	start := c.ptr(ci.Enc, e.addr, 0)
	n := c.ptr(ci.Enc&0x0f, e.addr, 0)
	if ci.aug {
		c.bytes(c.uleb())
	}
	if c.err != nil {
		return FDE{}, c.err
	}
	return FDE{CIE: ci, Start: start, End: start + n, Insns: e.data[c.off:next]}, nil
}

// Find returns the FDE covering pc (an address in the file's own terms).
func (e *EHFrame) Find(pc uint64) (FDE, error) {
	off := -1
	if e.hdr != nil {
		n := len(e.hdr) / 8
		i := sort.Search(n, func(i int) bool {
			return e.hdrAddr+uint64(int64(int32(binary.LittleEndian.Uint32(e.hdr[8*i:])))) > pc
		}) - 1
		if i < 0 {
			return FDE{}, ErrNoFDE
		}
		fa := e.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(e.hdr[8*i+4:]))))
		if fa < e.addr || fa-e.addr >= uint64(len(e.data)) {
			return FDE{}, ferr(8*i, "search table points outside .eh_frame")
		}
		off = int(fa - e.addr)
	} else {
		i := sort.Search(len(e.scanned), func(i int) bool { return e.scanned[i].start > pc }) - 1
		if i < 0 {
			return FDE{}, ErrNoFDE
		}
		off = e.scanned[i].off
	}
	f, err := e.fdeAt(off)
	if err != nil {
		return FDE{}, err
	}
	if pc < f.Start || pc >= f.End {
		return FDE{}, ErrNoFDE
	}
	return f, nil
}

// maxStates bounds DW_CFA_remember_state nesting.
const maxStates = 32

// RowAt runs the CIE's initial instructions and the FDE's up to pc and
// returns the row in force at pc.
func RowAt(f FDE, pc uint64) (Row, error) {
	var init Row
	init.CFAReg = RegRSP
	if err := execute(f.CIE, f.CIE.Init, &init, nil, f.Start, ^uint64(0)); err != nil {
		return Row{}, err
	}
	row := init
	if err := execute(f.CIE, f.Insns, &row, &init, f.Start, pc); err != nil {
		return Row{}, err
	}
	return row, nil
}

// execute interprets CFA instructions starting at loc, stopping at the
// first advance past pc. init is the CIE's row (for DW_CFA_restore*).
func execute(ci *CIE, insns []byte, row, init *Row, loc, pc uint64) error {
	c := &cursor{b: insns}
	var stack [maxStates]Row
	depth := 0
	set := func(reg uint64, r Rule) {
		if reg < NumRegs {
			row.Regs[reg] = r
		}
	}
	restore := func(reg uint64) {
		if reg < NumRegs {
			row.Regs[reg] = Rule{}
			if init != nil {
				row.Regs[reg] = init.Regs[reg]
			}
		}
	}
	advance := func(delta uint64) bool {
		loc += delta * ci.CodeAlign
		return loc > pc
	}
	for c.off < len(c.b) && c.err == nil {
		op := c.u8()
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			if advance(uint64(op & 0x3f)) {
				return nil
			}
			continue
		case 2: // DW_CFA_offset
			set(uint64(op&0x3f), Rule{Kind: RuleOffset, Off: int64(c.uleb()) * ci.DataAlign})
			continue
		case 3: // DW_CFA_restore
			restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case 0x00: // nop
		case 0x01: // set_loc
			loc = c.ptr(ci.Enc, 0, 0)
			if loc > pc {
				return c.err
			}
		case 0x02:
			if advance(uint64(c.u8())) {
				return c.err
			}
		case 0x03:
			if advance(uint64(c.u16())) {
				return c.err
			}
		case 0x04:
			if advance(uint64(c.u32())) {
				return c.err
			}
		case 0x05: // offset_extended
			reg := c.uleb()
			set(reg, Rule{Kind: RuleOffset, Off: int64(c.uleb()) * ci.DataAlign})
		case 0x06: // restore_extended
			restore(c.uleb())
		case 0x07: // undefined
			set(c.uleb(), Rule{Kind: RuleUndefined})
		case 0x08: // same_value
			set(c.uleb(), Rule{Kind: RuleSame})
		case 0x09: // register
			reg, r2 := c.uleb(), c.uleb()
			if r2 >= NumRegs {
				set(reg, Rule{Kind: RuleUndefined})
			} else {
				set(reg, Rule{Kind: RuleRegister, Reg: uint8(r2)})
			}
		case 0x0a: // remember_state
			if depth == maxStates {
				return ferr(c.off, "remember_state nested deeper than %d", maxStates)
			}
			stack[depth] = *row
			depth++
		case 0x0b: // restore_state
			if depth == 0 {
				return ferr(c.off, "restore_state without remember_state")
			}
			depth--
			// The CFA is part of the state too (DWARF 5 §6.4.2.4).
			*row = stack[depth]
		case 0x0c: // def_cfa
			row.CFAReg, row.CFAOff, row.CFAExpr = cfaReg(c.uleb()), int64(c.uleb()), nil
		case 0x0d: // def_cfa_register
			row.CFAReg, row.CFAExpr = cfaReg(c.uleb()), nil
		case 0x0e: // def_cfa_offset
			row.CFAOff = int64(c.uleb())
		case 0x0f: // def_cfa_expression
			row.CFAExpr = c.bytes(c.uleb())
			if row.CFAExpr == nil {
				row.CFAExpr = []byte{}
			}
		case 0x10, 0x16: // expression, val_expression
			reg := c.uleb()
			k := uint8(RuleExpr)
			if op == 0x16 {
				k = RuleValExpr
			}
			set(reg, Rule{Kind: k, Expr: c.bytes(c.uleb())})
		case 0x11: // offset_extended_sf
			reg := c.uleb()
			set(reg, Rule{Kind: RuleOffset, Off: c.sleb() * ci.DataAlign})
		case 0x12: // def_cfa_sf
			row.CFAReg, row.CFAOff, row.CFAExpr = cfaReg(c.uleb()), c.sleb()*ci.DataAlign, nil
		case 0x13: // def_cfa_offset_sf
			row.CFAOff = c.sleb() * ci.DataAlign
		case 0x14: // val_offset
			reg := c.uleb()
			set(reg, Rule{Kind: RuleValOffset, Off: int64(c.uleb()) * ci.DataAlign})
		case 0x15: // val_offset_sf
			reg := c.uleb()
			set(reg, Rule{Kind: RuleValOffset, Off: c.sleb() * ci.DataAlign})
		case 0x2e: // GNU_args_size
			c.uleb()
		case 0x2f: // GNU_negative_offset_extended
			reg := c.uleb()
			set(reg, Rule{Kind: RuleOffset, Off: -int64(c.uleb()) * ci.DataAlign})
		default:
			return ferr(c.off-1, "unknown CFA opcode 0x%x", op)
		}
	}
	return c.err
}

// cfaReg keeps register numbers in range: an out-of-range CFA register
// can't be evaluated, and 0xff says so.
func cfaReg(r uint64) uint8 {
	if r >= NumRegs {
		return 0xff
	}
	return uint8(r)
}
