package unwind

import "testing"

// TestRegsOf: each named register lands at its DWARF number, rip in the
// return address column, all known.
func TestRegsOf(t *testing.T) {
	r := RegsOf(GPRs{AX: 1, DX: 2, CX: 3, BX: 4, SI: 5, DI: 6, BP: 7, SP: 8, R8: 9, R9: 10, R10: 11, R11: 12,
		R12: 13, R13: 14, R14: 15, R15: 16, IP: 17})
	var want Regs
	for i, reg := range []int{RegRAX, RegRDX, RegRCX, RegRBX, RegRSI, RegRDI, RegRBP, RegRSP,
		RegR8, RegR8 + 1, RegR8 + 2, RegR8 + 3, RegR8 + 4, RegR8 + 5, RegR8 + 6, RegR15, RegRA} {
		want.Set(reg, uint64(i+1))
	}
	if r != want {
		t.Errorf("%+v, want %+v", r, want)
	}
}
