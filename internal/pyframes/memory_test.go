package pyframes

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func fill(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

// TestSnapshotRead: the address space below, with R1 and R2 adjacent and a
// hole before R3:
//
//	0x1000      0x1010      0x1020   0x1030  0x1040
//	|-- R1 'a' --|-- R2 'b' --|  hole  |- R3 -|
func TestSnapshotRead(t *testing.T) {
	s := &Snapshot{Pid: 77}
	s.Add(0x1000, fill(16, 'a'))
	s.Add(0x1010, fill(16, 'b'))
	s.Add(0x1030, []byte("0123456789abcdef"))

	ok := []struct {
		name string
		addr uint64
		n    int
		want string
	}{
		{"start of R1", 0x1000, 4, "aaaa"},
		{"whole R1", 0x1000, 16, strings.Repeat("a", 16)},
		{"end of R1", 0x100c, 4, "aaaa"},
		{"inside R3", 0x1035, 3, "567"},
		{"last byte of R3", 0x103f, 1, "f"},
		{"empty read at R3's end", 0x1040, 0, ""},
		{"empty read inside", 0x1031, 0, ""},
	}
	for _, tc := range ok {
		p := make([]byte, tc.n)
		if err := s.Read(tc.addr, p); err != nil || string(p) != tc.want {
			t.Errorf("%s: Read(%#x, %d) = (%q, %v), want %q", tc.name, tc.addr, tc.n, p, err, tc.want)
		}
	}
	bad := []struct {
		name string
		addr uint64
		n    int
	}{
		{"across adjacent regions", 0x100c, 8}, // Read needs one region holding the whole range
		{"one past R1 into R2 and beyond", 0x1000, 33},
		{"into the hole", 0x101c, 8},
		{"in the hole", 0x1024, 4},
		{"R3 and one more", 0x1030, 17},
		{"after everything", 0x1040, 1},
		{"below everything", 0xff0, 8},
		{"straddling the start", 0xffc, 8},
		{"address 0", 0, 8},
		{"top of the address space", ^uint64(0) - 3, 8},
	}
	for _, tc := range bad {
		p := fill(tc.n, 0xee)
		err := s.Read(tc.addr, p)
		var me *MemError
		if !errors.As(err, &me) || !errors.Is(err, ErrUnmapped) {
			t.Errorf("%s: Read(%#x, %d) = %v, want a *MemError wrapping ErrUnmapped", tc.name, tc.addr, tc.n, err)
			continue
		}
		if me.Pid != 77 || me.Addr != tc.addr || me.Want != tc.n || me.Got != 0 {
			t.Errorf("%s: MemError %+v, want pid 77 addr %#x want %d got 0", tc.name, *me, tc.addr, tc.n)
		}
		if msg := err.Error(); !strings.Contains(msg, "pid 77") || !strings.Contains(msg, "0x") {
			t.Errorf("%s: message %q does not name pid and address", tc.name, msg)
		}
		if !bytes.Equal(p, fill(tc.n, 0xee)) {
			t.Errorf("%s: a failed read wrote into the buffer: %x", tc.name, p)
		}
	}
	var empty Snapshot
	if err := empty.Read(0x1000, make([]byte, 1)); !errors.Is(err, ErrUnmapped) {
		t.Errorf("empty snapshot: %v", err)
	}
}

// TestSnapshotTopOfAddressSpace: a region ending at 2^64 must not wrap.
func TestSnapshotTopOfAddressSpace(t *testing.T) {
	s := &Snapshot{}
	top := ^uint64(0) - 15
	s.Add(top, fill(16, 'z'))
	if err := s.Read(top+8, make([]byte, 8)); err != nil {
		t.Errorf("last 8 bytes: %v", err)
	}
	if err := s.Read(top+8, make([]byte, 9)); err == nil {
		t.Error("read past 2^64 succeeded")
	}
	if err := s.Read(0, make([]byte, 1)); err == nil {
		t.Error("address 0 (after a wrap) succeeded")
	}
}

// TestSnapshotAddCopies: the snapshot keeps its own copy of the data.
func TestSnapshotAddCopies(t *testing.T) {
	data := []byte("abcd")
	var s Snapshot
	s.Add(0x10, data)
	data[0] = 'X'
	p := make([]byte, 4)
	if err := s.Read(0x10, p); err != nil || string(p) != "abcd" {
		t.Errorf("got (%q, %v), want abcd", p, err)
	}
}

// TestSnapshotOverlapSameStart: regions added at the same address: the later
// one wins where it covers the read; a read only the earlier, longer one
// covers still works.
func TestSnapshotOverlapSameStart(t *testing.T) {
	var s Snapshot
	s.Add(0x2000, fill(32, 'o'))
	s.Add(0x2000, fill(8, 'n'))
	p := make([]byte, 8)
	if err := s.Read(0x2000, p); err != nil || string(p) != "nnnnnnnn" {
		t.Errorf("covered by both: got (%q, %v), want the later region", p, err)
	}
	p = make([]byte, 16)
	if err := s.Read(0x2000, p); err != nil || string(p) != strings.Repeat("o", 16) {
		t.Errorf("only the earlier covers it: got (%q, %v)", p, err)
	}
}

// TestSnapshotOverlapLaterWins checks Add's documented rule, "Later regions
// win where they overlap", for overlaps whose regions start at different
// addresses, in both orders of adding:
//
//	0x3000           0x3010           0x3020
//	|------------ A (32 bytes) -------------|
//	                 |-- B (16) --|
func TestSnapshotOverlapLaterWins(t *testing.T) {
	read := func(s *Snapshot) string {
		p := make([]byte, 4)
		if err := s.Read(0x3010, p); err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	var s1 Snapshot // B added after A: B must win
	s1.Add(0x3000, fill(32, 'A'))
	s1.Add(0x3010, fill(16, 'B'))
	if got := read(&s1); got != "BBBB" {
		t.Errorf("A then B: read %q, want B's bytes", got)
	}
	var s2 Snapshot // A added after B: A must win
	s2.Add(0x3010, fill(16, 'B'))
	s2.Add(0x3000, fill(32, 'A'))
	if got := read(&s2); got != "AAAA" {
		t.Errorf("B then A: read %q, want A's bytes (the later region); Read picks the highest start address instead", got)
	}
}

func TestReaderHelpers(t *testing.T) {
	var s Snapshot
	s.Add(0x100, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	r := reader{mem: &s}
	if v, err := r.u64(0x100); err != nil || v != 0x0807060504030201 {
		t.Errorf("u64 = (%#x, %v)", v, err)
	}
	if v, err := r.u32(0x105); err != nil || v != 0x09080706 {
		t.Errorf("u32 = (%#x, %v)", v, err)
	}
	if _, err := r.u64(0x102); err == nil {
		t.Error("u64 past the region succeeded")
	}
	if _, err := r.u32(0x106); err == nil {
		t.Error("u32 past the region succeeded")
	}
	if b, err := r.bytes(0x101, 3); err != nil || !bytes.Equal(b, []byte{2, 3, 4}) {
		t.Errorf("bytes = (%v, %v)", b, err)
	}
	if b, err := r.bytes(0x101, 9); err == nil || b != nil {
		t.Errorf("short bytes = (%v, %v), want (nil, error)", b, err)
	}
	b := []byte{1, 0, 0, 0, 0, 0, 0, 0, 2}
	if le64(b, 0) != 1 || le64(b, 1) != 0x0200000000000000 || le64(b, 2) != 0 || le64(b, 100) != 0 {
		t.Error("le64 bounds")
	}
	if le32(b, 5) != 0x02000000 || le32(b, 6) != 0 || le32(b, 100) != 0 {
		t.Error("le32 bounds")
	}
}

// TestLeHugeOffset: le64/le32 promise 0 for an offset outside the buffer;
// off+8 must not wrap for offsets near 2^64.
func TestLeHugeOffset(t *testing.T) {
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, off := range []uint64{^uint64(0), ^uint64(0) - 3, ^uint64(0) - 7} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("le64/le32(b, %#x) panicked: %v", off, r)
				}
			}()
			if le64(b, off) != 0 || le32(b, off) != 0 {
				t.Errorf("le64/le32(b, %#x) not 0", off)
			}
		}()
	}
}
