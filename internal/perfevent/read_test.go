package perfevent

import (
	"encoding/binary"
	"testing"
)

func groupBytes(nr, enabled, running uint64, vals ...[2]uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, nr)
	b = binary.LittleEndian.AppendUint64(b, enabled)
	b = binary.LittleEndian.AppendUint64(b, running)
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, v[0])
		b = binary.LittleEndian.AppendUint64(b, v[1])
	}
	return b
}

func TestPerfDecodeGroupRead(t *testing.T) {
	g, err := DecodeGroupRead(groupBytes(2, 1000, 500, [2]uint64{3000, 7}, [2]uint64{6000, 8}))
	if err != nil {
		t.Fatal(err)
	}
	if g.Enabled != 1000 || g.Running != 500 || len(g.Values) != 2 || g.Values[1] != (Value{ID: 8, Value: 6000}) {
		t.Errorf("%+v", g)
	}
	bad := map[string][]byte{
		"short header":         make([]byte, 23),
		"nr 0":                 groupBytes(0, 1, 1),
		"nr too big":           groupBytes(maxGroup+1, 1, 1),
		"truncated values":     groupBytes(2, 1, 1, [2]uint64{1, 1})[:40],
		"running over enabled": groupBytes(1, 1, 2, [2]uint64{1, 1}),
	}
	for name, b := range bad {
		if g, err := DecodeGroupRead(b); err == nil || g.Values != nil {
			t.Errorf("%s: err %v result %+v", name, err, g)
		}
	}
}

func TestPerfDecodeSingleRead(t *testing.T) {
	b := binary.LittleEndian.AppendUint64(nil, 42)
	b = binary.LittleEndian.AppendUint64(b, 100)
	b = binary.LittleEndian.AppendUint64(b, 100)
	b = binary.LittleEndian.AppendUint64(b, 9)
	v, e, r, err := DecodeSingleRead(b)
	if err != nil || v != (Value{ID: 9, Value: 42}) || e != 100 || r != 100 {
		t.Errorf("%+v %d %d %v", v, e, r, err)
	}
	if _, _, _, err := DecodeSingleRead(b[:31]); err == nil {
		t.Error("short read: no error")
	}
}

func TestPerfScale(t *testing.T) {
	cases := []struct {
		raw, en, run uint64
		v            float64
		est, ok      bool
	}{
		{100, 1000, 1000, 100, false, true}, // never multiplexed
		{100, 1000, 250, 400, true, true},   // on the PMU a quarter of the time
		{0, 1000, 0, 0, false, false},       // enabled, never ran: no estimate
		{0, 0, 0, 0, false, true},           // never enabled: a true zero
	}
	for _, c := range cases {
		v, est, ok := Scale(c.raw, c.en, c.run)
		if v != c.v || est != c.est || ok != c.ok {
			t.Errorf("Scale(%d,%d,%d) = %v %v %v, want %v %v %v", c.raw, c.en, c.run, v, est, ok, c.v, c.est, c.ok)
		}
	}
}

// TestPerfWindow: per-thread deltas are scaled by each thread's own
// enabled/running and summed; a thread new in b counts from zero; a counter
// that went backwards clamps to zero; unsupported events stay unsupported.
func TestPerfWindow(t *testing.T) {
	ev := []EventInfo{{Name: "cycles", Group: 1, Supported: true}, {Name: "instructions", Group: 1, Supported: true},
		{Name: "branches", Group: 2, Reason: "not supported (ENOENT)"}}
	a := Reading{Events: ev, Threads: map[int][]Triple{
		1: {{1000, 100, 100}, {2000, 100, 100}, {}},
		2: {{500, 100, 50}, {900, 100, 50}, {}},
	}}
	b := Reading{Events: ev, Threads: map[int][]Triple{
		1: {{2000, 200, 200}, {4000, 200, 200}, {}}, // +1000 exact
		2: {{700, 300, 100}, {800, 300, 100}, {}},   // +200 over 200 enabled, 50 running → 800; instructions went backwards
		3: {{100, 100, 100}, {300, 100, 100}, {}},   // new thread
	}}
	w := Window(a, b)
	if w[0].Raw != 1300 || w[0].Scaled != 1000+800+100 || !w[0].Estimate || w[0].Enabled != 400 || w[0].Running != 250 {
		t.Errorf("cycles %+v", w[0])
	}
	if w[1].Raw != 2000+0+300 || w[1].Scaled != 2300 {
		t.Errorf("instructions %+v", w[1])
	}
	if w[2].Supported || w[2].Reason == "" || w[2].Raw != 0 {
		t.Errorf("branches %+v", w[2])
	}
	if s := w[0].RunningShare(); s != 250.0/400 {
		t.Errorf("running share %v", s)
	}
	tot := Totals(b)
	if tot[0].Raw != 2800 {
		t.Errorf("totals %+v", tot[0])
	}
}

func FuzzDecodeGroupRead(f *testing.F) {
	f.Add(groupBytes(2, 1000, 500, [2]uint64{3000, 7}, [2]uint64{6000, 8}))
	f.Add(groupBytes(1, 0, 0, [2]uint64{0, 0}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeGroupRead(b)
		if err != nil {
			if g.Values != nil || g.Enabled != 0 {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if len(g.Values) == 0 || len(g.Values) > maxGroup || g.Running > g.Enabled || 24+16*len(g.Values) > len(b) {
			t.Fatalf("accepted a bad read: %+v from %d bytes", g, len(b))
		}
	})
}
