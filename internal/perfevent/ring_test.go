package perfevent

import (
	"encoding/binary"
	"testing"
)

// rec builds one record: header {type, misc, size} then body.
func rec(typ uint32, body []byte) []byte {
	b := make([]byte, 8+len(body))
	binary.LittleEndian.PutUint32(b[0:], typ)
	binary.LittleEndian.PutUint16(b[6:], uint16(8+len(body)))
	copy(b[8:], body)
	return b
}

func sampleBody(pid, tid uint32, t uint64) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], pid)
	binary.LittleEndian.PutUint32(b[4:], tid)
	binary.LittleEndian.PutUint64(b[8:], t)
	return b
}

// put writes bytes into the ring at free-running position pos (wrapping).
func put(data []byte, pos uint64, b []byte) {
	for i, c := range b {
		data[(pos+uint64(i))%uint64(len(data))] = c
	}
}

func TestDrainRingWrapsRecords(t *testing.T) {
	// 64-byte ring; three 24-byte samples starting at 40:
	//   [ s2 s2 s2 | s3 s3 s3 ....... | s1 s1 s1 ]
	//   0          8      32          40       64
	// s1 fits at 40..63, s2 at 64..87 = 0..23, s3 at 88..111 = 24..47 (wraps over s1's old bytes? no: tail moved).
	data := make([]byte, 64)
	pos := uint64(40)
	for i := 0; i < 2; i++ {
		r := rec(RecordSample, sampleBody(7, uint32(100+i), uint64(i)))
		put(data, pos, r)
		pos += uint64(len(r))
	}
	var scratch []byte
	var got []Sample
	tail, err := DrainRing(data, 40, pos, &scratch, func(r RawRecord) {
		s, err := DecodeSample(r.Body, false)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	})
	if err != nil || tail != pos {
		t.Fatalf("tail %d err %v, want %d", tail, err, pos)
	}
	if len(got) != 2 || got[0].Tid != 100 || got[1].Tid != 101 || got[1].Time != 1 {
		t.Fatalf("got %+v", got)
	}
	// A record whose header itself wraps: 8-byte header split 4/4.
	data = make([]byte, 32)
	r := rec(RecordLost, []byte{1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0})
	put(data, 28, r)
	var lost uint64
	tail, err = DrainRing(data, 28, 28+24, &scratch, func(r RawRecord) {
		lost, _ = DecodeLost(r.Body)
	})
	if err != nil || tail != 52 || lost != 9 {
		t.Fatalf("wrapped header: tail %d lost %d err %v", tail, lost, err)
	}
}

func TestDrainRingPartialAndCorrupt(t *testing.T) {
	data := make([]byte, 64)
	r := rec(RecordSample, sampleBody(1, 2, 3))
	put(data, 0, r)
	var scratch []byte
	n := 0
	// head covers only part of the record: nothing is consumed.
	tail, err := DrainRing(data, 0, 10, &scratch, func(RawRecord) { n++ })
	if err != nil || tail != 0 || n != 0 {
		t.Fatalf("partial: tail %d n %d err %v", tail, n, err)
	}
	// size < 8 is corruption: error, and the tail jumps to head so we never loop.
	bad := make([]byte, 64)
	binary.LittleEndian.PutUint16(bad[6:], 4)
	tail, err = DrainRing(bad, 0, 16, &scratch, func(RawRecord) { n++ })
	if err == nil || tail != 16 {
		t.Fatalf("corrupt: tail %d err %v", tail, err)
	}
	if _, err := DrainRing(make([]byte, 48), 0, 8, &scratch, func(RawRecord) {}); err == nil {
		t.Fatal("non-power-of-two ring accepted")
	}
	if _, err := DrainRing(data, 0, 1000, &scratch, func(RawRecord) {}); err == nil {
		t.Fatal("head more than a ring past tail accepted")
	}
}

func TestDecodeSampleCallchain(t *testing.T) {
	b := sampleBody(1, 2, 3)
	b = binary.LittleEndian.AppendUint64(b, 2)
	b = binary.LittleEndian.AppendUint64(b, 0xffffffff81000000)
	b = binary.LittleEndian.AppendUint64(b, 0x400123)
	s, err := DecodeSample(b, true)
	if err != nil || len(s.Callchain) != 2 || s.Callchain[1] != 0x400123 {
		t.Fatalf("%+v %v", s, err)
	}
	b = binary.LittleEndian.AppendUint64(sampleBody(1, 2, 3), 1<<40)
	if _, err := DecodeSample(b, true); err == nil {
		t.Fatal("huge callchain length accepted")
	}
}

func FuzzDrainRing(f *testing.F) {
	f.Add(rec(RecordSample, sampleBody(1, 2, 3)), uint64(0), uint64(24))
	f.Fuzz(func(t *testing.T, raw []byte, tail, head uint64) {
		size := 64
		data := make([]byte, size)
		copy(data, raw)
		var scratch []byte
		calls := 0
		_, _ = DrainRing(data, tail, head, &scratch, func(r RawRecord) {
			calls++
			if len(r.Body) > size {
				t.Fatalf("body of %d bytes from a %d-byte ring", len(r.Body), size)
			}
			_, _ = DecodeSample(r.Body, true)
			_, _ = DecodeTask(r.Body)
		})
		if calls > size/8 {
			t.Fatalf("%d records from a %d-byte ring", calls, size)
		}
	})
}

func TestDecodeSampleRegsStack(t *testing.T) {
	f := SampleFormat{Callchain: true, RegsUser: 1<<RegSP | 1<<RegIP, StackUser: true}
	b := sampleBody(1, 2, 3)
	b = binary.LittleEndian.AppendUint64(b, 1) // callchain: 1 entry
	b = binary.LittleEndian.AppendUint64(b, 0xffffffff81000000)
	b = binary.LittleEndian.AppendUint64(b, 2) // ABI 64
	b = binary.LittleEndian.AppendUint64(b, 0x7ffc0000)
	b = binary.LittleEndian.AppendUint64(b, 0x401000)
	b = binary.LittleEndian.AppendUint64(b, 16) // stack size
	b = append(b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	b = binary.LittleEndian.AppendUint64(b, 8) // dyn_size
	s, err := DecodeSampleFormat(b, f)
	if err != nil || s.Regs[RegSP] != 0x7ffc0000 || s.Regs[RegIP] != 0x401000 || len(s.Stack) != 8 || s.Stack[7] != 8 || len(s.Callchain) != 1 {
		t.Fatalf("%+v %v", s, err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := DecodeSampleFormat(b[:n], f); err == nil {
			t.Fatalf("%d of %d bytes accepted", n, len(b))
		}
	}
}

func FuzzDecodeSample(f *testing.F) {
	f.Add(sampleBody(1, 2, 3), uint64(RegsGeneral), true, true)
	f.Fuzz(func(t *testing.T, b []byte, regs uint64, cc, stack bool) {
		s, err := DecodeSampleFormat(b, SampleFormat{Callchain: cc, RegsUser: regs, StackUser: stack})
		if err != nil && (s.Callchain != nil || s.Stack != nil) {
			t.Fatal("error with a result")
		}
		if len(s.Stack) > len(b) || 8*len(s.Callchain) > len(b) {
			t.Fatal("decoded more than the body holds")
		}
	})
}
