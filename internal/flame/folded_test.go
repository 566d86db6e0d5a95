package flame

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestFoldedGolden(t *testing.T) {
	for _, unit := range []string{"samples", "microseconds"} {
		t.Run(unit, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteFolded(&b, fixture(unit)); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "folded-"+unit, b.Bytes())
		})
	}
}

// The folded text reads back into the same frames (kinds, files, lines),
// except that thread and state frames come back as native ones.
func TestFoldedRoundTrip(t *testing.T) {
	p := fixture("samples")
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	q, err := ReadFolded(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if q.Total() != p.Total() || q.NumStacks() != p.NumStacks() {
		t.Fatalf("read back total %d in %d stacks, want %d in %d", q.Total(), q.NumStacks(), p.Total(), p.NumStacks())
	}
	want := map[string]Frame{}
	for i := range p.NumFrames() {
		f := p.Frame(i)
		if f.Kind == Thread || f.Kind == State {
			f = Frame{Kind: Native, Function: f.Function}
		}
		f.Addr = 0
		if f.Kind == Native {
			f.File = "" // the folded label of a native frame is its symbol
		}
		want[f.Label()] = f
	}
	for i := range q.NumFrames() {
		f := q.Frame(i)
		if w, ok := want[f.Label()]; !ok || w != f {
			t.Errorf("frame %q read back as %+v, want %+v", f.Label(), f, w)
		}
	}
	var b2 bytes.Buffer
	if err := WriteFolded(&b2, q); err != nil {
		t.Fatal(err)
	}
	if b.String() != b2.String() {
		t.Errorf("write → read → write changed the text:\n%s", lineDiff(b.String(), b2.String()))
	}
}

func TestParseLabel(t *testing.T) {
	for _, tc := range []struct {
		label string
		want  Frame
	}{
		{"work (app.py:3)", Frame{Kind: Python, Function: "work", File: "app.py", Line: 3}},
		{"<module> (/srv/a b (copy)/x.py:10)", Frame{Kind: Python, Function: "<module>", File: "/srv/a b (copy)/x.py", Line: 10}},
		{"處理 (模組.py:0)", Frame{Kind: Python, Function: "處理", File: "模組.py", Line: 0}},
		{"f (C:\\x.py:12)", Frame{Kind: Python, Function: "f", File: "C:\\x.py", Line: 12}},
		{"f (x.py:012)", Frame{Kind: Native, Function: "f (x.py:012)"}}, // not canonical: Label can't give it
		{"f (x.py:+1)", Frame{Kind: Native, Function: "f (x.py:+1)"}},
		{"f (x.py:)", Frame{Kind: Native, Function: "f (x.py:)"}},
		{"[unknown] (libc.so.6+0x9a1b)", Frame{Kind: Native, Function: "[unknown] (libc.so.6+0x9a1b)"}},
		{"do_syscall_64_[k]", Frame{Kind: Kernel, Function: "do_syscall_64"}},
		{"_PyEval_EvalFrameDefault", Frame{Kind: Native, Function: "_PyEval_EvalFrameDefault"}},
	} {
		got := ParseLabel(tc.label)
		if got != tc.want {
			t.Errorf("ParseLabel(%q) = %+v, want %+v", tc.label, got, tc.want)
		}
		if got.Label() != tc.label {
			t.Errorf("ParseLabel(%q).Label() = %q", tc.label, got.Label())
		}
	}
}

func TestReadFoldedErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		line int
		msg  string
	}{
		{"a;b 1\nnoweight\n", 2, "no weight"},
		{"a;b x\n", 1, "not an integer"},
		{"a;b 1.5\n", 1, "not an integer"},
		{"a;b -1\n", 1, "negative"},
		{"\n\na;;b 1\n", 3, "empty frame 2"},
		{"a;b; 1\n", 1, "empty frame at end"},
		{";a 1\n", 1, "empty frame 1"},
		{" 5\n", 1, "empty stack"},
		{"a 9223372036854775807\nb 1\n", 2, "overflows"},
		{"a 99999999999999999999\n", 1, "not an integer"},
	} {
		p, err := ReadFolded(strings.NewReader(tc.in))
		var fe *FoldedError
		if !errors.As(err, &fe) {
			t.Errorf("ReadFolded(%q) = %v, want a FoldedError", tc.in, err)
			continue
		}
		if p != nil {
			t.Errorf("ReadFolded(%q): error with a non-nil profile", tc.in)
		}
		if fe.Line != tc.line || !strings.Contains(fe.Error(), tc.msg) {
			t.Errorf("ReadFolded(%q) = %v, want line %d and %q", tc.in, err, tc.line, tc.msg)
		}
	}
}

func TestReadFoldedAccepts(t *testing.T) {
	p, err := ReadFolded(strings.NewReader("a;b 1\r\n\n   \na;b 2\na;b;c 0\nx  y 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	if want := "a;b 3\na;b;c 0\nx  y 3\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// A line longer than MaxFoldedLine is an error, found without holding
// much more than that line in memory.
func TestReadFoldedLongLine(t *testing.T) {
	in := "a;b 1\n" + strings.Repeat("x;", 4*MaxFoldedLine) + " 1\n"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := ReadFolded(strings.NewReader(in))
	runtime.ReadMemStats(&after)
	var fe *FoldedError
	if !errors.As(err, &fe) || fe.Line != 2 || p != nil {
		t.Fatalf("got %v, %v; want a FoldedError on line 2", p, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*MaxFoldedLine {
		t.Errorf("allocated %d bytes to reject a %d-byte line", alloc, len(in))
	}
}

// Labels with the folded format's separators are written so they read back
// as one frame each.
func TestWriteFoldedSeparatorsInLabels(t *testing.T) {
	p := New(Meta{Unit: "samples"})
	p.Add([]Frame{{Kind: Python, Function: "f", File: "a;b\nc.py", Line: 1}, {Kind: Native, Function: "g"}}, 2)
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	if want := "f (a:b c.py:1);g 2\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	q, err := ReadFolded(&b)
	if err != nil || q.NumFrames() != 2 {
		t.Fatalf("read back: %v, %d frames", err, q.NumFrames())
	}
}

func foldedSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{
		filepath.Join("..", "..", "testdata", "flame", "folded", "*.folded"),
		filepath.Join(goldenDir, "folded-*.golden"),
	} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		t.Fatal("no seeds in testdata/flame")
	}
	return seeds
}

// Every seed in testdata/flame/folded parses as its name says.
func TestFoldedTestdata(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "flame", "folded", "*.folded"))
	if len(files) == 0 {
		t.Fatal("no testdata/flame/folded/*.folded")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ReadFolded(bytes.NewReader(b))
		bad := strings.HasPrefix(filepath.Base(f), "bad-")
		if bad != (err != nil) {
			t.Errorf("%s: err = %v", f, err)
		}
	}
}

// FuzzReadFolded: no panic; an error comes with a nil profile; a profile
// read is no bigger than its input, keeps its total when written and read
// back, and its text is a fixed point of write → read.
func FuzzReadFolded(f *testing.F) {
	for _, s := range foldedSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := ReadFolded(bytes.NewReader(in))
		if err != nil {
			if p != nil {
				t.Fatalf("error %v with a non-nil profile", err)
			}
			return
		}
		if p.NumFrames() > len(in) || p.NumStacks() > len(in) {
			t.Fatalf("%d bytes gave %d frames, %d stacks", len(in), p.NumFrames(), p.NumStacks())
		}
		var once bytes.Buffer
		if err := WriteFolded(&once, p); err != nil {
			t.Fatal(err)
		}
		q, err := ReadFolded(bytes.NewReader(once.Bytes()))
		if err != nil {
			t.Fatalf("can't read what WriteFolded wrote: %v\n%q", err, once.String())
		}
		// Writing can merge stacks (labels that differ only in a separator
		// it replaced), so the text is a fixed point from the second write.
		var twice, thrice bytes.Buffer
		if err := WriteFolded(&twice, q); err != nil {
			t.Fatal(err)
		}
		r, err := ReadFolded(bytes.NewReader(twice.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteFolded(&thrice, r); err != nil {
			t.Fatal(err)
		}
		if twice.String() != thrice.String() {
			t.Fatalf("not a fixed point:\n%s", lineDiff(twice.String(), thrice.String()))
		}
		if q.Total() != p.Total() {
			t.Fatalf("total %d became %d", p.Total(), q.Total())
		}
	})
}

// Stacks whose text is the same (one kernel symbol at two addresses) are
// one line.
func TestWriteFoldedMergesSameText(t *testing.T) {
	p := New(Meta{Unit: "samples"})
	p.Add([]Frame{{Kind: Native, Function: "main"}, {Kind: Kernel, Function: "read", Addr: 1}}, 2)
	p.Add([]Frame{{Kind: Native, Function: "main"}, {Kind: Kernel, Function: "read", Addr: 2}}, 3)
	p.Add([]Frame{}, 7)
	var b bytes.Buffer
	if err := WriteFolded(&b, p); err != nil {
		t.Fatal(err)
	}
	if want := "main;read_[k] 5\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
