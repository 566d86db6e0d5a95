//go:build amd64

package kwalk

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestDecodeTgid: a record as pywalk.h lays it out (header, then frames)
// decodes with the sampled thread's process, and a record shorter than its
// depth says is an error.
func TestDecodeTgid(t *testing.T) {
	var b bytes.Buffer
	h := kwalkSampleHdr{Time: 7, Id: 9, Tid: 4243, Tgid: 4242, Flags: FlagComplete, Depth: 2, Hops: 3, Cpu: 1}
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	for _, f := range []kwalkFrame{{Code: 0x1000, Lasti: 5}, {Code: 0x2000, Lasti: -1, Flags: FrameEntry}} {
		if err := binary.Write(&b, binary.LittleEndian, f); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != hdrSize+2*frameSize {
		t.Fatalf("record of %d bytes, want %d", b.Len(), hdrSize+2*frameSize)
	}
	s, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if s.Tgid != 4242 || s.Tid != 4243 || s.CPU != 1 || len(s.Frames) != 2 || s.Frames[1].Code != 0x2000 || s.Frames[1].Flags != FrameEntry {
		t.Errorf("decoded %+v", s)
	}
	if _, err := Decode(b.Bytes()[:hdrSize+frameSize]); err == nil {
		t.Error("a record one frame short decoded without an error")
	}
}

// Walker.Read peeks a record's stack id at bytes 8..16 without decoding it.
func TestSampleIDOffset(t *testing.T) {
	if off := unsafe.Offsetof(kwalkSampleHdr{}.Id); off != 8 {
		t.Fatalf("struct sample_hdr's id at byte %d; Walker.Read peeks it at 8", off)
	}
}
