package tracepoint

import (
	"bytes"
	"testing"

	"github.com/pyobs/pyobs/internal/pyframes"
)

func TestOverlay(t *testing.T) {
	live := &pyframes.Snapshot{}
	live.Add(0x10000, bytes.Repeat([]byte{0xaa}, 64))
	o := &overlay{live: live, regs: []region{{0x10008, []byte{1, 2}}, {0x1000, []byte{7, 8, 9}}}}
	p := make([]byte, 16)
	if err := o.Read(0x10000, p); err != nil {
		t.Fatal(err)
	}
	if p[7] != 0xaa || p[8] != 1 || p[9] != 2 || p[10] != 0xaa {
		t.Fatalf("patched read: % x", p)
	}
	q := make([]byte, 2)
	if err := o.Read(0x1001, q); err != nil || q[0] != 8 || q[1] != 9 {
		t.Fatalf("read inside a region: % x %v", q, err)
	}
	if err := o.Read(0x1000, make([]byte, 4)); err == nil {
		t.Fatal("a read past a region into unmapped memory succeeded")
	}
	segs := []pyframes.Seg{{Addr: 0x10000, Buf: make([]byte, 4)}, {Addr: 0x1000, Buf: make([]byte, 3)}, {Addr: 0x5000, Buf: make([]byte, 1)}}
	if n := o.ReadV(segs); n != 2 || segs[1].Buf[2] != 9 {
		t.Fatalf("ReadV: %d segments, % x", n, segs[1].Buf)
	}
}
