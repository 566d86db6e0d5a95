package bpfload

import (
	"testing"
	"unsafe"

	"github.com/pyobs/pyobs/internal/unwind"
)

// natRecord builds a record as natcopy.h lays it out: the head, then n
// stack bytes.
func natRecord(h NatHead, n int) []byte {
	b := make([]byte, int(unsafe.Sizeof(h))+n)
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h)))
	for i := 0; i < n; i++ {
		b[int(unsafe.Sizeof(h))+i] = byte(i)
	}
	return b
}

func TestDecodeNat(t *testing.T) {
	h := NatHead{Id: 7, Tid: 42, Len: 64, Tgid: 40, Flags: 1, Kstack: 3, Nlinks: 2, Sp: 0x7ffd0000, Ip: 0x401000}
	h.Links[0], h.Links[1] = 0x7ffd0100, 0x7ffd0800
	got, stack, err := DecodeNat(natRecord(h, 64))
	if err != nil || got.Id != 7 || got.Tid != 42 || got.Nlinks != 2 || got.Links[1] != 0x7ffd0800 || len(stack) != 64 || stack[63] != 63 {
		t.Fatalf("DecodeNat = %+v, %d bytes, %v", got, len(stack), err)
	}
	if r := got.Regs(); r.V[unwind.RegRSP] != 0x7ffd0000 {
		t.Errorf("rsp %#x", r.V[unwind.RegRSP])
	}
	for _, bad := range []NatHead{{Len: 65}, {Len: NatMaxBytes + 1}, {Nlinks: NatLinks + 1}} {
		if _, _, err := DecodeNat(natRecord(bad, 64)); err == nil {
			t.Errorf("DecodeNat accepted %+v with 64 stack bytes", bad)
		}
	}
	if _, _, err := DecodeNat(make([]byte, 8)); err == nil {
		t.Error("DecodeNat accepted 8 bytes")
	}
}

func FuzzDecodeNat(f *testing.F) {
	f.Add(natRecord(NatHead{Len: 16, Nlinks: 1}, 16))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, stack, err := DecodeNat(b)
		if err != nil {
			return
		}
		if len(stack) != int(h.Len) || h.Nlinks > NatLinks || int(h.Len)+natHdr > len(b) {
			t.Fatalf("%d stack bytes for Len %d, %d links, record %d bytes", len(stack), h.Len, h.Nlinks, len(b))
		}
	})
}
