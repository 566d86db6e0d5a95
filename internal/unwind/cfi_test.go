package unwind

import (
	"encoding/binary"
	"errors"
	"testing"
)

// ehFrame builds a .eh_frame at addr with one CIE (zR, pcrel|sdata4,
// code align 1, data align -8, RA r16; CFA rsp+8, RA at CFA-8) and one FDE
// covering [start, start+n) with insns.
func ehFrame(addr, start, n uint64, insns []byte) []byte {
	cie := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1}
	for len(cie)%4 != 0 {
		cie = append(cie, 0)
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(cie)))
	b = append(b, cie...)
	fdeOff := len(b)
	body := binary.LittleEndian.AppendUint32(nil, uint32(fdeOff+4)) // back to the CIE
	pcField := addr + uint64(fdeOff) + 8
	body = binary.LittleEndian.AppendUint32(body, uint32(int32(int64(start)-int64(pcField))))
	body = binary.LittleEndian.AppendUint32(body, uint32(n))
	body = append(body, 0) // augmentation data length
	body = append(body, insns...)
	for (len(body)+4)%8 != 0 {
		body = append(body, 0)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// push rbp; sub $16,%rsp; … with remember/restore around an epilogue and a
// PLT-style CFA expression at the end.
var testInsns = []byte{
	0x41, 0x0e, 16, 0x86, 2, // +1: push rbp: CFA=rsp+16, rbp at CFA-16
	0x44, 0x0e, 32, // +5: sub: CFA=rsp+32
	0x44, 0x0a, 0x0e, 8, // +9: remember; epilogue: CFA=rsp+8
	0x41, 0x0b, // +10: restore: CFA=rsp+32 again
	0x41, 0x0f, 11, 0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22, // +11: rsp+8+((rip&15)>=11)<<3
}

func TestRowAtAndStep(t *testing.T) {
	const addr, start = 0x2000, 0x1000
	e, err := NewEHFrame(ehFrame(addr, start, 64, testInsns), addr, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pc     uint64
		cfaOff int64
		rbp    bool
	}{{start, 8, false}, {start + 1, 16, true}, {start + 4, 16, true}, {start + 5, 32, true}, {start + 9, 8, true}, {start + 10, 32, true}} {
		f, err := e.Find(c.pc)
		if err != nil {
			t.Fatalf("pc 0x%x: %v", c.pc, err)
		}
		row, err := RowAt(f, c.pc)
		if err != nil {
			t.Fatal(err)
		}
		if row.CFAReg != RegRSP || row.CFAOff != c.cfaOff || (row.Regs[RegRBP].Kind == RuleOffset) != c.rbp || row.Regs[RegRA].Off != -8 {
			t.Errorf("pc 0x%x: row %+v", c.pc, row)
		}
	}
	if _, err := e.Find(start + 64); !errors.Is(err, ErrNoFDE) {
		t.Errorf("past the FDE: %v", err)
	}
	// Step at +5: stack [rsp]=junk×2, [rsp+16]=saved rbp, [rsp+24]=return address.
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[16:], 0xbbbb)
	binary.LittleEndian.PutUint64(stack[24:], 0x401234)
	f, _ := e.Find(start + 5)
	row, _ := RowAt(f, start+5)
	var regs Regs
	regs.Set(RegRSP, 0x7000)
	regs.Set(RegRA, start+5)
	next, err := Step(&row, &regs, StackCopy{Base: 0x7000, Data: stack})
	if err != nil || next.V[RegRA] != 0x401234 || next.V[RegRSP] != 0x7020 || next.V[RegRBP] != 0xbbbb {
		t.Fatalf("step: %+v %v", next.V, err)
	}
	// The PLT expression: rip&15 = 0xb (>= 11) → CFA = rsp+16.
	f, _ = e.Find(start + 11)
	row, _ = RowAt(f, start+11)
	regs.Set(RegRA, start+11)
	next, err = Step(&row, &regs, StackCopy{Base: 0x7000, Data: stack})
	if err != nil || next.V[RegRSP] != 0x7010 {
		t.Fatalf("PLT expression: rsp 0x%x %v", next.V[RegRSP], err)
	}
	// A return address outside the copy: truncated, not garbage.
	f, _ = e.Find(start + 5)
	row, _ = RowAt(f, start+5)
	if _, err := Step(&row, &regs, StackCopy{Base: 0x7000, Data: stack[:24]}); !errors.Is(err, ErrOutsideCopy) {
		t.Errorf("short copy: %v", err)
	}
}

func TestHdrTable(t *testing.T) {
	const addr, hdrAddr, start = 0x2000, 0x1f00, 0x1000
	eh := ehFrame(addr, start, 64, testInsns)
	hdr := []byte{1, 0x1b, 0x03, 0x3b}
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(addr-(hdrAddr+4)))
	hdr = binary.LittleEndian.AppendUint32(hdr, 1)
	s, h := int64(start), int64(hdrAddr)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(int32(s-h)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(int32(addr+24-hdrAddr))) // the FDE sits after the 24-byte CIE entry
	e, err := NewEHFrame(eh, addr, hdr, hdrAddr)
	if err != nil || e.hdr == nil {
		t.Fatalf("%v (table %v)", err, e != nil && e.hdr != nil)
	}
	if f, err := e.Find(start + 3); err != nil || f.Start != start || f.End != start+64 {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := e.Find(start - 1); !errors.Is(err, ErrNoFDE) {
		t.Fatalf("below the table: %v", err)
	}
}

func TestLEB(t *testing.T) {
	c := &cursor{b: []byte{0xe5, 0x8e, 0x26, 0x7f, 0x80, 0x7f}}
	if v := c.uleb(); v != 624485 {
		t.Errorf("uleb %d", v)
	}
	if v := c.sleb(); v != -1 {
		t.Errorf("sleb %d", v)
	}
	if v := c.sleb(); v != -128 {
		t.Errorf("sleb %d", v)
	}
}

// FuzzCFI: any bytes as .eh_frame (scanned), any pc: no panic, and errors
// come back as values.
func FuzzCFI(f *testing.F) {
	f.Add(ehFrame(0x2000, 0x1000, 64, testInsns), uint64(0x1005))
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0x78}, uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		e, err := NewEHFrame(data, 0x2000, nil, 0)
		if err != nil {
			if e != nil {
				t.Fatal("error with a result")
			}
			return
		}
		fde, err := e.Find(pc)
		if err != nil {
			return
		}
		row, err := RowAt(fde, pc)
		if err != nil {
			return
		}
		var regs Regs
		regs.Set(RegRSP, 0x7000)
		regs.Set(RegRA, pc)
		_, _ = Step(&row, &regs, StackCopy{Base: 0x7000, Data: data})
	})
}
