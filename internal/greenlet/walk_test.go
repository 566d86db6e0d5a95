package greenlet

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// fakeList lays out a GC list in one region: a head at base, then nodes
// (GC header, refcount, type, weakreflist, dict, pimpl) every 64 bytes.
// types[i] is node i's ob_type.
func fakeList(base uint64, types []uint64) ([]byte, []uint64) {
	n := len(types)
	mem := make([]byte, 64*(n+1))
	addr := func(i int) uint64 { // -1: the head
		return base + 64*uint64(i+1)
	}
	nodes := make([]uint64, n)
	for i := range nodes {
		nodes[i] = addr(i)
	}
	put := func(a, off, v uint64) { binary.LittleEndian.PutUint64(mem[a-base+off:], v) }
	head := base
	if n == 0 {
		put(head, 0, head)
		put(head, 8, head)
		return mem, nodes
	}
	put(head, 0, nodes[0])
	put(head, 8, nodes[n-1]|1) // prev carries flag bits
	for i, a := range nodes {
		next, prev := head, head
		if i+1 < n {
			next = nodes[i+1]
		}
		if i > 0 {
			prev = nodes[i-1]
		}
		put(a, 0, next)
		put(a, 8, prev|2)
		put(a, 24, types[i])
		put(a, 48, 0x5000+uint64(i)) // pimpl
	}
	return mem, nodes
}

func TestWalkList(t *testing.T) {
	const base, gt, other = 0x10000, 0xaaa0, 0xbbb0
	isG := func(tp uint64) bool { return tp == gt }
	types := make([]uint64, 200) // 200 nodes: the list spans several pages
	for i := range types {
		types[i] = other
		if i%7 == 3 {
			types[i] = gt
		}
	}
	mem, nodes := fakeList(base, types)
	snap := &pyframes.Snapshot{}
	snap.Add(base, mem)
	pc := newPageCache(snap)
	objs, n, err := walkList(pc, base, isG)
	if err != nil || n != len(types) {
		t.Fatalf("walk: %d objects, %v", n, err)
	}
	want := 0
	for i, tp := range types {
		if tp == gt {
			o := objs[want]
			if o.addr != nodes[i]+16 || o.typ != gt || o.pimpl != 0x5000+uint64(i) {
				t.Errorf("object %d: %+v", want, o)
			}
			want++
		}
	}
	if len(objs) != want {
		t.Errorf("%d greenlets, want %d", len(objs), want)
	}
	if pages := (len(mem) + pageSize - 1) / pageSize; pc.reads > pages+12 { // the last page is not whole: its 11 nodes are read one by one
		t.Errorf("%d reads for %d pages", pc.reads, pages)
	}

	// An empty list.
	empty, _ := fakeList(0x80000, nil)
	snap.Add(0x80000, empty)
	if objs, n, err := walkList(newPageCache(snap), 0x80000, isG); err != nil || n != 0 || len(objs) != 0 {
		t.Errorf("empty list: %v %d %v", objs, n, err)
	}

	// A node whose prev does not point back: the list changed under the
	// walk. What was read before it is kept.
	torn := append([]byte(nil), mem...)
	binary.LittleEndian.PutUint64(torn[nodes[100]-base+8:], 0xdead0)
	s2 := &pyframes.Snapshot{}
	s2.Add(base, torn)
	objs, n, err = walkList(newPageCache(s2), base, isG)
	if !errors.Is(err, errTornList) || n != 101 || len(objs) != 14 {
		t.Errorf("torn: %d objects, %d greenlets, %v", n, len(objs), err)
	}

	// A next pointer into unmapped memory.
	broken := append([]byte(nil), mem...)
	binary.LittleEndian.PutUint64(broken[nodes[5]-base:], 0x900000)
	s3 := &pyframes.Snapshot{}
	s3.Add(base, broken)
	if _, _, err := walkList(newPageCache(s3), base, isG); !errors.Is(err, errTornList) {
		t.Errorf("unmapped next: %v", err)
	}
}

func TestPageCacheStraddle(t *testing.T) {
	data := make([]byte, 3*pageSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	snap := &pyframes.Snapshot{}
	snap.Add(0x40000+100, data[100:]) // the first page is not wholly readable
	pc := newPageCache(snap)
	for _, a := range []uint64{0x40000 + 100, 0x40000 + pageSize - 8, 0x40000 + 2*pageSize + 5} {
		b, err := pc.read(a, 56)
		if err != nil {
			t.Fatalf("0x%x: %v", a, err)
		}
		for i, x := range b {
			if x != data[a-0x40000+uint64(i)] {
				t.Fatalf("0x%x+%d: %d, want %d", a, i, x, data[a-0x40000+uint64(i)])
			}
		}
	}
	if _, err := pc.read(0x40000+3*pageSize-8, 56); err == nil {
		t.Error("a read past the end succeeded")
	}
}
