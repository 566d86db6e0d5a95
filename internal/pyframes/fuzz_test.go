package pyframes

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"runtime/metrics"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzz targets for every byte parser in the package, seeded from the golden
// files. The property everywhere: no panic; an error comes with a zero/nil
// result; time and allocation stay bounded for inputs up to maxFuzzInput.
//
//	go test -run=NONE -fuzz=FuzzLineFromLocations -fuzztime=20s ./internal/pyframes/

const maxFuzzInput = 64 << 10

// bounded runs fn and fails if it takes longer than d or allocates more
// than maxAlloc bytes of heap in total. (runtime/metrics, not ReadMemStats:
// no stop-the-world per fuzz input.)
func bounded(t *testing.T, d time.Duration, maxAlloc uint64, fn func()) {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	start := time.Now()
	fn()
	took := time.Since(start)
	metrics.Read(sample)
	if took > d {
		t.Errorf("took %v (limit %v)", took, d)
	}
	if a := sample[0].Value.Uint64() - before; a > maxAlloc {
		t.Errorf("allocated %d bytes (limit %d)", a, maxAlloc)
	}
}

func goldenCodes(f *testing.F, minors ...int) []lineCode {
	var out []lineCode
	for _, b := range seedFiles(f, "linetable-3.*.json") {
		var g struct {
			Python string     `json:"python"`
			Codes  []lineCode `json:"codes"`
		}
		if err := json.Unmarshal(b, &g); err != nil {
			f.Fatal(err)
		}
		v := 0
		if len(g.Python) >= 4 {
			v = int(g.Python[2]-'0')*10 + int(g.Python[3]-'0')
		}
		for _, m := range minors {
			if v == m {
				out = append(out, g.Codes...)
			}
		}
	}
	if len(out) == 0 {
		f.Fatal("no golden code objects to seed from")
	}
	return out
}

func FuzzLineFromLocations(f *testing.F) {
	for _, c := range goldenCodes(f, 11, 12, 13, 14, 15) {
		tbl := c.table(f)
		f.Add(tbl, c.FirstLineno, 0)
		f.Add(tbl, c.FirstLineno, c.CodeUnits/2)
		f.Add(tbl, c.FirstLineno, c.CodeUnits-1)
		f.Add(tbl, c.FirstLineno, c.CodeUnits)
	}
	f.Add([]byte{}, 1, -1)
	f.Add(cat(locLong(1<<25, 8), locNone(3)), -5, 9)
	f.Fuzz(func(t *testing.T, table []byte, first, addrq int) {
		if len(table) > maxFuzzInput {
			return
		}
		var got int
		var err error
		bounded(t, time.Second, 1<<20, func() { got, err = LineFromLocations(table, first, addrq) })
		if err != nil && got != 0 {
			t.Fatalf("error %v with line %d", err, got)
		}
		if addrq < 0 {
			if err != nil || got != first {
				t.Fatalf("negative addrq: got (%d, %v), want %d", got, err, first)
			}
			return
		}
		lines, none, _ := refLocations(table, first)
		if addrq < len(lines) {
			switch {
			case none[addrq]:
				if !errors.Is(err, ErrNoLine) {
					t.Fatalf("unit %d has no location: got (%d, %v)", addrq, got, err)
				}
			case err != nil || got != lines[addrq]:
				t.Fatalf("unit %d: got (%d, %v), oracle %d", addrq, got, err, lines[addrq])
			}
		} else if err == nil || errors.Is(err, ErrNoLine) {
			t.Fatalf("unit %d beyond the %d decodable units: got (%d, %v)", addrq, len(lines), got, err)
		}
	})
}

// ref310 is the fuzz oracle for 3.10 tables: a plain per-byte expansion.
func ref310(table []byte, first, off int) (int, bool, bool) {
	line, start := first, 0
	for i := 0; i+1 < len(table); i += 2 {
		end := start + int(table[i])
		none := table[i+1] == 0x80
		if !none {
			line += int(int8(table[i+1]))
		}
		if off >= start && off < end {
			return line, none, true
		}
		start = end
	}
	return 0, false, false
}

func FuzzLineFrom310Table(f *testing.F) {
	for _, c := range goldenCodes(f, 10) {
		tbl := c.table(f)
		f.Add(tbl, c.FirstLineno, 0)
		f.Add(tbl, c.FirstLineno, c.CodeUnits)
		f.Add(tbl, c.FirstLineno, 2*c.CodeUnits-1)
	}
	f.Add([]byte{0, 127, 0, 127, 4, 0x80, 3}, 1, 2)
	f.Fuzz(func(t *testing.T, table []byte, first, off int) {
		if len(table) > maxFuzzInput {
			return
		}
		var got int
		var err error
		bounded(t, time.Second, 1<<20, func() { got, err = LineFrom310Table(table, first, off) })
		if err != nil && got != 0 {
			t.Fatalf("error %v with line %d", err, got)
		}
		if off < 0 {
			if err != nil || got != first {
				t.Fatalf("negative offset: got (%d, %v), want %d", got, err, first)
			}
			return
		}
		want, none, found := ref310(table, first, off)
		switch {
		case !found:
			if err == nil || errors.Is(err, ErrNoLine) {
				t.Fatalf("offset %d past the table: got (%d, %v)", off, got, err)
			}
		case none:
			if !errors.Is(err, ErrNoLine) {
				t.Fatalf("offset %d has no line: got (%d, %v)", off, got, err)
			}
		case err != nil || got != want:
			t.Fatalf("offset %d: got (%d, %v), oracle %d", off, got, err, want)
		}
	})
}

func FuzzDecodeUnicodeData(f *testing.F) {
	for _, b := range seedFiles(f, "unicode-3.*.json") {
		var g unicodeGolden
		if err := json.Unmarshal(b, &g); err != nil {
			f.Fatal(err)
		}
		for _, s := range g.Facts {
			data := make([]byte, len(s.Data)/2)
			for i := range data {
				data[i] = unhex(s.Data[2*i])<<4 | unhex(s.Data[2*i+1])
			}
			f.Add(data, s.Kind, len(s.CodePoints))
		}
	}
	f.Add([]byte("abc"), 3, 1)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, 4, 1)
	f.Fuzz(func(t *testing.T, data []byte, kind, length int) {
		if len(data) > maxFuzzInput {
			return
		}
		var s string
		var err error
		// Output is at most 4 bytes per code point, and length*kind <= len(data);
		// 1 MiB of slack: heap statistics count whole spans.
		bounded(t, time.Second, uint64(8*len(data))+1<<20, func() { s, err = DecodeUnicodeData(data, kind, length) })
		if err != nil {
			if s != "" {
				t.Fatalf("error %v with result %q", err, s)
			}
			return
		}
		if kind != 1 && kind != 2 && kind != 4 {
			t.Fatalf("kind %d accepted", kind)
		}
		if length < 0 || length > len(data)/kind {
			t.Fatalf("length %d of kind %d accepted for %d bytes", length, kind, len(data))
		}
		// One rune per code point, but a lone surrogate, written as the
		// six characters of its \uXXXX escape.
		want := length
		for i := 0; i < length && kind > 1; i++ {
			var c uint32
			if kind == 2 {
				c = uint32(data[2*i]) | uint32(data[2*i+1])<<8
			} else {
				c = uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24
			}
			if c >= 0xd800 && c <= 0xdfff {
				want += 5
			}
		}
		if !utf8.ValidString(s) || utf8.RuneCountInString(s) != want {
			t.Fatalf("%q: valid %v, %d runes, want %d", s, utf8.ValidString(s), utf8.RuneCountInString(s), want)
		}
	})
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func FuzzParseDebugOffsets(f *testing.F) {
	for _, b := range seedFiles(f, "debug-offsets-3.*.bin") {
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(patch(b, 16, 1))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzInput {
			return
		}
		var d *DebugOffsets
		var err error
		bounded(t, time.Second, 2<<20, func() { d, err = ParseDebugOffsets(b) })
		if (err == nil) == (d == nil) {
			t.Fatalf("got (%v, %v): want exactly one of a table and an error", d, err)
		}
		if err != nil {
			return
		}
		v := VersionHex(d.Version)
		if v.Major != 3 || DebugTableSize(v.Minor) == 0 || len(b) < DebugTableSize(v.Minor) {
			t.Fatalf("accepted version %s with %d bytes", v, len(b))
		}
		if len(d.Fields) != len(fieldOffsets(v.Minor)) {
			t.Fatalf("%d fields, want %d", len(d.Fields), len(fieldOffsets(v.Minor)))
		}
		for k, x := range d.Fields {
			if x > maxStructSize {
				t.Fatalf("%s = %d accepted", k, x)
			}
		}
		l, err := layoutFromDebugOffsets(d)
		if (err == nil) == (l == nil) {
			t.Fatalf("layoutFromDebugOffsets: got (%v, %v)", l, err)
		}
		if err != nil {
			return
		}
		// What the walker indexes without checks must lie inside what it reads.
		if l.FrameSize < l.FrameOwner+1 || l.FrameSize < l.FramePrevious+8 || l.FrameSize < l.FrameCode+8 || l.FrameSize < l.FrameInstr+8 {
			t.Fatalf("FrameSize %d does not cover owner %d / previous %d / code %d / instr %d",
				l.FrameSize, l.FrameOwner, l.FramePrevious, l.FrameCode, l.FrameInstr)
		}
		if l.CodeSize < l.CodeFirstLineno+4 {
			t.Fatalf("CodeSize %d does not cover firstlineno %d", l.CodeSize, l.CodeFirstLineno)
		}
	})
}

// FuzzWalkSnapshot walks a fuzzed 3.12 address space: the input is the
// whole arena of standardWorld (runtime, types, interpreter, threads, frames,
// code and objects), mapped at worldBase with the world's symbol addresses.
// Mutations make any pointer, length, kind or table garbage. The walker must
// not panic, must end (its depth and count caps), and must not allocate
// without bound.
func FuzzWalkSnapshot(f *testing.F) {
	w, want := standardWorld(f)
	info := w.info()
	f.Add(w.buf)
	f.Add(w.buf[:len(w.buf)/2])
	// Other versions in Py_Version: the 3.10 and 3.11 layouts over 3.12 objects.
	for _, v := range []uint32{0x030a0df0, 0x030b07f0} {
		b := append([]byte(nil), w.buf...)
		binary.LittleEndian.PutUint32(b[w.syms["Py_Version"]-w.base:], v)
		f.Add(b)
	}
	// A frame chain and a thread list that loop.
	f.Add(loopedWorld(w, want))
	// The same world with each golden debug-offsets table at _PyRuntime:
	// New takes the 3.13+ path and walks the 3.12 objects with it.
	for _, tbl := range seedFiles(f, "debug-offsets-3.*.bin") {
		b := append([]byte(nil), w.buf...)
		copy(b, tbl)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		s := &Snapshot{Pid: 4242}
		s.Add(worldBase, data)
		inf := *info
		p, err := New(s, 4242, &inf)
		if err != nil {
			if p != nil {
				t.Fatalf("New returned a Process with error %v", err)
			}
			return
		}
		for _, opt := range []Options{{Locals: true, Names: true}, {}} {
			var threads []Thread
			bounded(t, 5*time.Second, 256<<20, func() { threads, err = p.Threads(opt) })
			if len(threads) > maxThreads*maxInterps {
				t.Fatalf("%d threads", len(threads))
			}
			for _, th := range threads {
				if len(th.Frames) > MaxDepth {
					t.Fatalf("%d frames", len(th.Frames))
				}
				for _, fr := range th.Frames {
					if !utf8.ValidString(fr.Function) || !utf8.ValidString(fr.File) {
						t.Fatalf("invalid UTF-8 in frame %+v", fr)
					}
				}
			}
		}
	})
}
