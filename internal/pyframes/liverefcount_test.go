package pyframes

import (
	"encoding/binary"
	"testing"
)

// TestLiveRefcount: the allocators' free-list links (a pointer, or NULL
// at a list's end) where a freed code object's count was are not live
// counts; immortal objects are.
func TestLiveRefcount(t *testing.T) {
	hdr := func(rc uint64) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, rc)
		return b
	}
	for _, c := range []struct {
		minor int
		ft    bool
		rc    uint64
		live  bool
	}{
		{12, false, 3, true},
		{12, false, 0xffffffff, true},    // immortal (3.12/3.13)
		{12, false, 0x1_0000_0001, true}, // immortal, increased by an extension built for 3.11
		{12, false, 0, false},
		{13, false, 0x7f12_3456_7890, false}, // pymalloc's next free block
		{11, false, 0x5555_5555_a000, false},
		{14, false, 3 << 30, true},                // immortal, heap
		{14, false, 0x0004_0000_0000_0001, true},  // a flag bit set (static)
		{14, false, 0x0000_7f12_3456_7890, false}, // a pointer
		{14, false, 1, true},
		{13, true, 0x7f12_3456_7890, true}, // free-threaded: ob_tid, not checked
	} {
		l := &Layout{Version: Version{3, c.minor, 0}, FreeThreaded: c.ft, ObType: 8}
		if got := l.liveRefcount(hdr(c.rc)); got != c.live {
			t.Errorf("3.%d ft=%v count 0x%x: live %v, want %v", c.minor, c.ft, c.rc, got, c.live)
		}
		// A Py_TRACE_REFS build: two list pointers first, the count at 16.
		tr := &Layout{Version: Version{3, c.minor, 0}, FreeThreaded: c.ft, ObType: 24}
		b := make([]byte, 32)
		binary.LittleEndian.PutUint64(b, 0x7f00_0000_1000)
		binary.LittleEndian.PutUint64(b[8:], 0x7f00_0000_2000)
		binary.LittleEndian.PutUint64(b[16:], c.rc)
		if got := tr.liveRefcount(b); got != c.live {
			t.Errorf("3.%d ft=%v trace-refs count 0x%x: live %v, want %v", c.minor, c.ft, c.rc, got, c.live)
		}
	}
}
