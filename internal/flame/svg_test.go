package flame

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestSVGGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		unit string
		opts SVGOptions
	}{
		{"svg-flame", "samples", SVGOptions{}},
		{"svg-icicle-title-microseconds", "microseconds", SVGOptions{Icicle: true, Title: `處理 & <ünïcode> "off-CPU"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteSVG(&b, fixture(tc.unit), tc.opts); err != nil {
				t.Fatal(err)
			}
			parseSVG(t, b.Bytes())
			checkGolden(t, tc.name, b.Bytes())
		})
	}
}

type svgFrameInfo struct {
	depth          int
	class, label   string
	weight, off    int64
	x, width       float64
	text           string
	levelTransform string
}

type svgDoc struct {
	root   map[string]string // attributes of <svg>
	frames []svgFrameInfo
	texts  map[string]string // class → text of the header/status texts
}

// parseSVG reads the SVG with a strict XML parser and collects the frames.
func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	doc := svgDoc{root: map[string]string{}, texts: map[string]string{}}
	attrs := func(se xml.StartElement) map[string]string {
		m := map[string]string{}
		for _, a := range se.Attr {
			m[a.Name.Local] = a.Value
		}
		return m
	}
	depth, transform := -1, ""
	var cur *svgFrameInfo
	var textClass string
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			a := attrs(tk)
			switch {
			case tk.Name.Local == "svg":
				doc.root = a
			case tk.Name.Local == "g" && a["class"] == "level":
				depth, _ = strconv.Atoi(a["data-depth"])
				transform = a["transform"]
			case tk.Name.Local == "g" && strings.HasPrefix(a["class"], "frame "):
				w, err1 := strconv.ParseInt(a["data-weight"], 10, 64)
				o, err2 := strconv.ParseInt(a["data-off"], 10, 64)
				if err1 != nil || err2 != nil || a["data-label"] == "" {
					t.Fatalf("frame without data-weight/data-off/data-label: %v", a)
				}
				cur = &svgFrameInfo{depth: depth, class: strings.TrimPrefix(a["class"], "frame "), label: a["data-label"],
					weight: w, off: o, levelTransform: transform}
			case tk.Name.Local == "rect" && cur != nil:
				cur.x, _ = strconv.ParseFloat(a["x"], 64)
				cur.width, _ = strconv.ParseFloat(a["width"], 64)
			case tk.Name.Local == "text":
				inText, textClass = true, a["class"]
			}
		case xml.CharData:
			if inText && cur != nil {
				cur.text += string(tk)
			} else if inText {
				doc.texts[textClass] += string(tk)
			}
		case xml.EndElement:
			if tk.Name.Local == "text" {
				inText = false
			}
			if tk.Name.Local == "g" && cur != nil && !inText {
				doc.frames = append(doc.frames, *cur)
				cur = nil
			}
		}
	}
	if len(doc.frames) == 0 || doc.frames[0].label != "all" || doc.frames[0].depth != 0 {
		t.Fatalf("no root frame")
	}
	return doc
}

// The drawn frames are the flame graph of the profile: widths proportional
// to weights, every frame inside its parent, siblings apart, text cut to
// fit, non-ASCII kept.
func TestSVGGeometry(t *testing.T) {
	p := fixture("samples")
	var b bytes.Buffer
	if err := WriteSVG(&b, p, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, b.Bytes())
	total := p.Total()
	if doc.root["data-total"] != strconv.FormatInt(total, 10) {
		t.Fatalf("data-total %s", doc.root["data-total"])
	}
	scale := float64(svgFrameW) / float64(total)
	byDepth := map[int][]svgFrameInfo{}
	for _, f := range doc.frames {
		if math.Abs(f.width-float64(f.weight)*scale) > 0.006 || math.Abs(f.x-svgPad-float64(f.off)*scale) > 0.006 {
			t.Errorf("%q: x %.2f width %.2f for off %d weight %d", f.label, f.x, f.width, f.off, f.weight)
		}
		cells := 0
		for _, r := range f.text {
			cells += svgRuneW(r)
		}
		if f.text != svgFit(f.label, f.width) || (f.text != "" && 6+float64(cells)*svgCharW > f.width) {
			t.Errorf("%q: text %q in %.2f px", f.label, f.text, f.width)
		}
		byDepth[f.depth] = append(byDepth[f.depth], f)
	}
	for d := 1; d < len(byDepth); d++ {
		var end int64
		for _, f := range byDepth[d] {
			if f.off < end {
				t.Errorf("depth %d: %q overlaps its left neighbour", d, f.label)
			}
			end = f.off + f.weight
			inside := false
			for _, parent := range byDepth[d-1] {
				inside = inside || (parent.off <= f.off && f.off+f.weight <= parent.off+parent.weight)
			}
			if !inside {
				t.Errorf("depth %d: %q outside every parent", d, f.label)
			}
		}
	}
	want := map[string]int64{"fib (app.py:5)": 420 + 300 + 300, "worker-處理": 450, "Ünïcode.méthod (ünïcode.py:7)": 80, "sleeping": 150, "ksys_read_[k]": 50}
	got := map[string]int64{}
	classes := map[string]byte{}
	for _, f := range doc.frames {
		got[f.label] += f.weight
		classes[f.label] = f.class[0]
	}
	for l, w := range want {
		if got[l] != w {
			t.Errorf("%q: drawn weight %d, want %d", l, got[l], w)
		}
	}
	for l, c := range map[string]byte{"fib (app.py:5)": 'p', "_PyObject_Call": 'n', "ksys_read_[k]": 'k', "MainThread": 't', "sleeping": 's', "all": 'r'} {
		if classes[l] != c {
			t.Errorf("%q: class %c, want %c", l, classes[l], c)
		}
	}
	// The header carries the recording's account of itself.
	for _, s := range []string{"mode wall", "1,000 samples", "10.00 s", "99.0 Hz requested, 97.5 Hz achieved"} {
		if !strings.Contains(doc.texts["meta"], s) {
			t.Errorf("header %q lacks %q", doc.texts["meta"], s)
		}
	}
	for _, s := range []string{"lost 3 (0.30%)", "torn 7 (0.70%)", "failed 1", "throttled 0"} {
		if !strings.Contains(doc.texts["meta warn"], s) {
			t.Errorf("warning line %q lacks %q", doc.texts["meta warn"], s)
		}
	}
}

// "Folded output loads in the SVG renderer": the folded text of a profile
// draws the same frames as the profile itself (only the thread and state
// frames' colours differ: folded text can't tell them from native ones).
func TestSVGFromFolded(t *testing.T) {
	p := fixture("samples")
	var folded, direct, viaFolded bytes.Buffer
	if err := WriteFolded(&folded, p); err != nil {
		t.Fatal(err)
	}
	q, err := ReadFolded(&folded)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(&direct, p, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(&viaFolded, q, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	key := func(f svgFrameInfo) string { return fmt.Sprintf("%d %d %d %s", f.depth, f.off, f.weight, f.label) }
	a, b := parseSVG(t, direct.Bytes()).frames, parseSVG(t, viaFolded.Bytes()).frames
	if len(a) != len(b) {
		t.Fatalf("%d frames directly, %d via folded", len(a), len(b))
	}
	for i := range a {
		if key(a[i]) != key(b[i]) {
			t.Errorf("frame %d: %s directly, %s via folded", i, key(a[i]), key(b[i]))
		}
	}
}

// Frames narrower than 0.1 px are not drawn, and the header says how many.
func TestSVGPrunesNarrowFrames(t *testing.T) {
	p := New(Meta{Unit: "samples"})
	main := Frame{Kind: Python, Function: "main", File: "a.py", Line: 1}
	p.Add([]Frame{main, {Kind: Python, Function: "hot", File: "a.py", Line: 2}}, 1_000_000)
	for i := range 5000 {
		p.Add([]Frame{main, {Kind: Python, Function: fmt.Sprintf("cold%d", i), File: "a.py", Line: 3}, {Kind: Native, Function: "leaf"}}, 1)
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, p, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, b.Bytes())
	if len(doc.frames) != 3 {
		t.Errorf("%d frames drawn, want all, main, hot", len(doc.frames))
	}
	for _, f := range doc.frames {
		if f.width < svgMinPx {
			t.Errorf("%q drawn at %.3f px", f.label, f.width)
		}
	}
	if f := doc.frames[1]; f.label != "main (a.py:1)" || f.weight != 1_005_000 {
		t.Errorf("main: %+v (the undrawn frames' weight must stay in their parent)", f)
	}
	if !strings.Contains(doc.texts["meta"], "10,000 frames under 0.1 px not drawn") {
		t.Errorf("header %q does not say what was left out", doc.texts["meta"])
	}
	if b.Len() > 20_000 {
		t.Errorf("%d bytes for 3 frames", b.Len())
	}
}

func TestSVGEdgeCases(t *testing.T) {
	for name, p := range map[string]*Profile{
		"empty": New(Meta{Unit: "samples"}),
		"zero weight": func() *Profile {
			p := New(Meta{Unit: "samples"})
			p.Add([]Frame{{Kind: Native, Function: "f"}}, 0)
			return p
		}(),
		"hostile labels": func() *Profile {
			p := New(Meta{Unit: "samples", Python: "3.12\x00<&>"})
			p.Add([]Frame{{Kind: Native, Function: "a\x00b\x01<c>&\"d\"\xff\xfe"}, {Kind: Python, Function: "]]>", File: "\ufffe\t\n", Line: -1}}, 5)
			return p
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteSVG(&b, p, SVGOptions{Title: "]]> <x> &amp;"}); err != nil {
				t.Fatal(err)
			}
			doc := parseSVG(t, b.Bytes())
			if name == "hostile labels" && (len(doc.frames) != 3 || doc.frames[1].label != "a\ufffdb\ufffd<c>&\"d\"\ufffd\ufffd") {
				t.Errorf("frames %+v", doc.frames)
			}
		})
	}
}

func TestSVGFit(t *testing.T) {
	for _, tc := range []struct {
		label string
		px    float64
		want  string
	}{
		{"main (app.py:25)", 500, "main (app.py:25)"},
		{"main (app.py:25)", 6 + 16*svgCharW, "main (app.py:25)"},
		{"main (app.py:25)", 6 + 15*svgCharW, "main (app.py:.."},
		{"main", 6 + 2.9*svgCharW, ""},
		{"處理資料", 6 + 8*svgCharW, "處理資料"},
		{"處理資料", 6 + 7*svgCharW, "處理.."},
		{"ünïcode", 6 + 5*svgCharW, "ünï.."},
	} {
		if got := svgFit(tc.label, tc.px); got != tc.want {
			t.Errorf("svgFit(%q, %.1f) = %q, want %q", tc.label, tc.px, got, tc.want)
		}
	}
}

// matchedShare is what the SVG's search must report for re: the share of
// the weight in stacks with at least one matching frame (each sample once,
// however many frames in its stack match).
func matchedShare(p *Profile, re *regexp.Regexp) float64 {
	var m int64
	for _, s := range p.Stacks() {
		for _, id := range s.Frames {
			if re.MatchString(p.Frame(id).Label()) {
				m += s.Weight
				break
			}
		}
	}
	return 100 * float64(m) / float64(p.Total())
}
