package pyframes

import (
	"encoding/binary"
	"slices"
	"testing"
)

// TestTLSVote: the main thread proposes, the other threads rank.
func TestTLSVote(t *testing.T) {
	cases := []struct {
		name    string
		main    []int64
		hasMain bool
		others  [][]int64
		want    []int64
	}{
		{"unanimous, two places", []int64{0x328, -16}, true, [][]int64{{0x328, -16}, {-16, 0x328}}, []int64{-16, 0x328}},
		{"a thread being born has no slot yet", []int64{0x328}, true, [][]int64{{0x328}, {}}, []int64{0x328}},
		{"detached threads lack the attached-only variable", []int64{0x328, -16}, true, [][]int64{{0x328}, {0x328}}, []int64{0x328}},
		{"most threads mid-birth, stack copies in common", []int64{0x328}, true,
			[][]int64{{-2400, -3488}, {-2400, -3488}, {-2400}, {0x328, -2400}}, []int64{0x328}},
		{"main thread alone", []int64{-40}, true, nil, []int64{-40}},
		{"main thread has no slot", nil, true, [][]int64{{0x328}}, nil},
		{"no main: a majority of one offset", nil, false, [][]int64{{0x328}, {0x328, -2400}, {}}, []int64{0x328}},
		{"no main: stack copies tie the slot", nil, false, [][]int64{{0x328, -2400}, {0x328, -2400}}, nil},
		{"no main: per-thread blocks (dlopen)", nil, false, [][]int64{{0x338}, {-4000}, {-2000}}, nil},
		{"no thread", nil, false, nil, nil},
	}
	for _, c := range cases {
		if got := tlsVote(c.main, c.hasMain, c.others); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMainThreadRef: by native id, else the main interpreter's oldest.
func TestMainThreadRef(t *testing.T) {
	refs := []ThreadRef{{NativeID: 12}, {NativeID: 10}, {NativeID: 11}}
	if got := mainThreadRef(refs, 10); got != 1 {
		t.Errorf("by native id: %d", got)
	}
	if got := mainThreadRef(refs, 99); got != -1 {
		t.Errorf("absent: %d", got)
	}
	old := []ThreadRef{{Interp: 0, Addr: 3}, {Interp: 0, Addr: 2}, {Interp: 1, Addr: 1}}
	if got := mainThreadRef(old, 10); got != 1 {
		t.Errorf("3.10: %d", got)
	}
}

// TestOwnOffsets: the scan finds every 8-aligned copy of the address,
// relative to fsbase at the window's middle.
func TestOwnOffsets(t *testing.T) {
	buf := make([]byte, 2*tlsWindow)
	const addr = 0x7f00deadbee0
	for _, off := range []int{-tlsWindow, -16, 0x328, tlsWindow - 8} {
		binary.LittleEndian.PutUint64(buf[tlsWindow+off:], addr)
	}
	binary.LittleEndian.PutUint64(buf[tlsWindow+40:], addr+1)
	got := ownOffsets(buf, addr)
	if want := []int64{-tlsWindow, -16, 0x328, tlsWindow - 8}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// pageMem is readable on [lo, hi) only.
type pageMem struct{ lo, hi uint64 }

func (m pageMem) Read(addr uint64, p []byte) error {
	if addr < m.lo || addr+uint64(len(p)) > m.hi {
		return &MemError{Addr: addr, Want: len(p)}
	}
	for i := range p {
		p[i] = 0xab
	}
	return nil
}

// TestReadPages: a window whose top runs into an unreadable page keeps what
// was readable below it.
func TestReadPages(t *testing.T) {
	buf := make([]byte, 2*tlsWindow)
	for i := range buf {
		buf[i] = 1
	}
	const fs = 0x7f0000001a00 // not page-aligned, as fsbase is not
	if !readPages(pageMem{lo: 0x7f0000000000, hi: 0x7f0000002000}, fs-tlsWindow, buf) {
		t.Fatal("nothing read")
	}
	readable := 0x7f0000002000 - (fs - tlsWindow)
	for i, b := range buf {
		if want := byte(0xab); i >= readable {
			want = 0
		} else if b != want {
			t.Fatalf("byte %d: %#x, want %#x", i, b, want)
		}
		if i >= readable && b != 0 {
			t.Fatalf("byte %d past the mapping: %#x, want 0", i, b)
		}
	}
	if readPages(pageMem{}, fs, buf) {
		t.Error("an unreadable window read")
	}
}
