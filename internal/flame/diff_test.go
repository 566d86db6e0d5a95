package flame

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/pyobs/pyobs/internal/testutil"
)

// diffPair: base spends 80 % in alpha, new (twice the samples) 80 % in beta.
func diffPair() (base, newp *Profile) {
	f := func(name string, line int) Frame {
		return Frame{Kind: Python, Function: name, File: "t.py", Line: line}
	}
	base = New(Meta{Unit: "samples"})
	base.Add([]Frame{f("main", 9), f("alpha", 2)}, 80)
	base.Add([]Frame{f("main", 10), f("beta", 5)}, 20)
	base.Add([]Frame{f("gone", 1)}, 4)
	newp = New(Meta{Unit: "samples"})
	newp.Add([]Frame{f("main", 9), f("alpha", 2)}, 40)
	newp.Add([]Frame{f("main", 10), f("beta", 5)}, 160)
	return base, newp
}

var diffFrameRE = regexp.MustCompile(`<g class="frame ([a-z0-9]+)" data-label="([^"]*)" data-weight="(\d+)" data-off="\d+" data-base="(\d+)">`)

func diffFrames(t *testing.T, svg string) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for _, m := range diffFrameRE.FindAllStringSubmatch(svg, -1) {
		out[m[2]] = [2]string{m[1], m[3] + "/" + m[4]}
	}
	return out
}

// TestDiffSVG: new's shape, alpha (share 77 % → 20 %) blue at full shade,
// beta (19 % → 80 %) red, the header says how shares were normalised and
// what base had that new does not draw.
func TestDiffSVG(t *testing.T) {
	base, newp := diffPair()
	var b bytes.Buffer
	count := Weight{Type: "samples", Unit: "count"}
	if err := WriteDiffSVG(&b, base, newp, DiffOptions{Base: "base.pb.gz", New: "new.folded", BaseWeight: count, NewWeight: count}); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	fr := diffFrames(t, svg)
	want := map[string][2]string{
		"all":            {"d0", "200/104"},
		"main (t.py:9)":  {"ds8", "40/80"},
		"alpha (t.py:2)": {"ds8", "40/80"},
		"main (t.py:10)": {"dg8", "160/20"},
		"beta (t.py:5)":  {"dg8", "160/20"},
	}
	for l, w := range want {
		if fr[l] != w {
			t.Errorf("%s: class and weight/base %v, want %v", l, fr[l], w)
		}
	}
	if len(fr) != len(want) {
		t.Errorf("frames %v", fr)
	}
	for _, s := range []string{"normalised by total samples (base 104, new 200)", "most grown: beta (t.py:5) +60.77 pp", "most shrunk: alpha (t.py:2) -56.92 pp", "red grew, blue shrank", "3.85% of base's samples are on stacks new's graph does not draw", "base.pb.gz → new.folded"} {
		if !strings.Contains(svg, s) {
			t.Errorf("header lacks %q", s)
		}
	}
}

// TestDiffSVGInChromium: in a browser, alpha's rectangle is blue, beta's
// red, and hovering beta shows both recordings' values.
func TestDiffSVGInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		testutil.Skip(t, "no chromium to load the SVG in a browser (Debian: apt-get install -y chromium)")
	}
	base, newp := diffPair()
	var b bytes.Buffer
	if err := WriteDiffSVG(&b, base, newp, DiffOptions{Base: "b", New: "n"}); err != nil {
		t.Fatal(err)
	}
	got := DiffInChromium(t, bin, b.Bytes(), "alpha (t.py:2)", "beta (t.py:5)")
	if !got.ABlue || !got.BRed {
		t.Errorf("fills: alpha %s, beta %s; want blue and red", got.AFill, got.BFill)
	}
	if want := "beta (t.py:5) \u2014 new 160 (80.00%), base 20 (19.23%), +60.77 pp"; got.Status != want {
		t.Errorf("hover: %q, want %q", got.Status, want)
	}
}

// ChromiumDiff is what a browser showed of a differential graph.
type ChromiumDiff struct {
	AFill, BFill string
	ABlue, BRed  bool
	Status       string // the status line while hovering B
}

// DiffInChromium loads svg in headless Chromium and reads frame a's and
// b's computed fill and the status line while hovering b.
func DiffInChromium(t *testing.T, bin string, svg []byte, a, b string) ChromiumDiff {
	t.Helper()
	script := `(function () {
var svg = document.querySelector('svg.pyobs-flame'), out = [];
function fr(l) { return [].filter.call(svg.querySelectorAll('g.frame'), function (g) { return g.getAttribute('data-label') == l; })[0]; }
try {
  var a = fr(A), b = fr(B);
  out.push(getComputedStyle(a.querySelector('rect')).fill, getComputedStyle(b.querySelector('rect')).fill);
  b.querySelector('rect').dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
  out.push(svg.querySelector('.status').textContent);
} catch (e) { out.push('error: ' + e); }
var t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
t.setAttribute('id', 'pyobs-test-result'); t.textContent = encodeURIComponent(JSON.stringify(out)); svg.appendChild(t);
})();`
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	script = strings.Replace(strings.Replace(script, "fr(A)", "fr("+q(a)+")", 1), "fr(B)", "fr("+q(b)+")", 1)
	doc := string(svg)
	end := strings.LastIndex(doc, "</svg>")
	doc = doc[:end] + "<script><![CDATA[\n" + script + "\n]]></script>\n" + doc[end:]
	path := filepath.Join(t.TempDir(), "diff.svg")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	js := testutil.ChromiumResult(t, bin, path, "pyobs-test-result")
	var res []string
	if err := jsonUnmarshal([]byte(js), &res); err != nil || len(res) != 3 {
		t.Fatalf("result %q: %v", js, err)
	}
	rgb := regexp.MustCompile(`rgb\((\d+), (\d+), (\d+)\)`)
	colour := func(s string) (r, g, b int) {
		m := rgb.FindStringSubmatch(s)
		if m == nil {
			return
		}
		return atoi(m[1]), atoi(m[2]), atoi(m[3])
	}
	d := ChromiumDiff{AFill: res[0], BFill: res[1], Status: res[2]}
	if r, g, b := colour(res[0]); b > r+60 && b > g {
		d.ABlue = true
	}
	if r, g, b := colour(res[1]); r > b+60 && r > g {
		d.BRed = true
	}
	return d
}

// TestDiffThreads: thread roots match by name across runs (TIDs differ).
func TestDiffThreads(t *testing.T) {
	f := func(th, name string) []Frame {
		return []Frame{{Kind: Thread, Function: th}, {Kind: Python, Function: name, File: "t.py", Line: 1}}
	}
	base, newp := New(Meta{Unit: "samples"}), New(Meta{Unit: "samples"})
	base.Add(f("MainThread (7)", "work"), 10)
	base.Add(f("thread 8", "work"), 10)
	newp.Add(f("MainThread (17)", "work"), 10)
	newp.Add(f("thread 18", "work"), 10)
	// A process root (record of a set, or of a command that forks): its
	// pid differs from run to run too.
	base.Add(append([]Frame{{Kind: Thread, Function: "[pid 40] python mp.py"}}, f("thread 41", "kid")...), 10)
	newp.Add(append([]Frame{{Kind: Thread, Function: "[pid 50] python mp.py"}}, f("thread 51", "kid")...), 10)
	var b bytes.Buffer
	if err := WriteDiffSVG(&b, base, newp, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	for l, fr := range diffFrames(t, b.String()) {
		if fr[0] != "d0" || fr[1] != "10/10" && fr[1] != "20/20" && fr[1] != "30/30" {
			t.Errorf("%s: %v, want unchanged", l, fr)
		}
	}
	if !strings.Contains(b.String(), "no frame's share moved") {
		t.Error("header does not say nothing moved")
	}
}

// TestDiffPprof: new's samples as they are, base's scaled to new's total,
// negated and labelled pprof::base; go tool pprof reads the change.
func TestDiffPprof(t *testing.T) {
	base, newp := diffPair()
	var b bytes.Buffer
	if err := WriteDiffPprof(&b, base, newp, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var pos, neg int64
	for _, s := range pp.Sample {
		isBase := s.HasLabel("pprof::base", "true")
		if v := s.Value[0]; v > 0 && !isBase {
			pos += v
		} else if v < 0 && isBase {
			neg += v
		} else {
			t.Errorf("sample %v value %d base %v", s.Location, v, isBase)
		}
	}
	if pos != 200 || neg < -201 || neg > -199 {
		t.Errorf("new %d, base %d; want 200 and -200 (scaled to new's total)", pos, neg)
	}
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Skip(t, "no go command for go tool pprof")
	}
	path := filepath.Join(t.TempDir(), "diff.pb.gz")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	// base: alpha 80/104*200 = 154, beta 38; new: alpha 40, beta 160.
	for _, re := range []string{`(?m)^\s+-114\s.*alpha$`, `(?m)^\s+122\s.*beta$`, `(?m)^\s+-8\s.*gone$`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("go tool pprof -top lacks %s:\n%s", re, out)
		}
	}
}

// TestReadProfile: both formats by content; pyobs's pprof reads back as
// the stacks it was written from (threads and states included).
func TestReadProfile(t *testing.T) {
	p := New(Meta{Unit: "samples", Mode: "cpu"})
	p.Add([]Frame{{Kind: Thread, Function: "MainThread (7)"}, {Kind: Python, Function: "main", File: "a.py", Line: 3},
		{Kind: Native, Function: "memcpy", File: "/lib/libc.so.6"}, {Kind: Kernel, Function: "do_syscall_64"}}, 5)
	p.Add([]Frame{{Kind: Thread, Function: "w (8)"}, {Kind: State, Function: "[late read]"}}, 2)
	var folded, pb bytes.Buffer
	if err := WriteFolded(&folded, p); err != nil {
		t.Fatal(err)
	}
	if err := WritePprof(&pb, p); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"folded": folded.Bytes(), "pprof": pb.Bytes()} {
		q, _, err := ReadProfile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var back bytes.Buffer
		if err := WriteFolded(&back, q); err != nil {
			t.Fatal(err)
		}
		if back.String() != folded.String() {
			t.Errorf("%s read back as\n%s\nwant\n%s", name, back.String(), folded.String())
		}
	}
	for _, bad := range []string{"", "a;b x\n", "\x00\x01\x02garbage"} {
		if q, _, err := ReadProfile(strings.NewReader(bad)); err == nil || q != nil {
			t.Errorf("%q: %v, %v", bad, q, err)
		}
	}
}

// weightProfile: two stacks, main;wait and main;work, with one value per
// sample type (vals[i] the stacks' values for type i).
func weightProfile(types []*profile.ValueType, dflt string, period *profile.ValueType, vals ...[2]int64) []byte {
	fn := []*profile.Function{{ID: 1, Name: "main", Filename: "t.py"}, {ID: 2, Name: "wait", Filename: "t.py"}, {ID: 3, Name: "work", Filename: "t.py"}}
	loc := make([]*profile.Location, 3)
	for i := range loc {
		loc[i] = &profile.Location{ID: uint64(i + 1), Line: []profile.Line{{Function: fn[i], Line: int64(i + 1)}}}
	}
	pp := &profile.Profile{SampleType: types, DefaultSampleType: dflt, Function: fn, Location: loc}
	if period != nil {
		pp.PeriodType, pp.Period = period, 10_000_000
	}
	for j, leaf := range []*profile.Location{loc[1], loc[2]} {
		s := &profile.Sample{Location: []*profile.Location{leaf, loc[0]}}
		for _, v := range vals {
			s.Value = append(s.Value, v[j])
		}
		pp.Sample = append(pp.Sample, s)
	}
	var b bytes.Buffer
	if err := pp.Write(&b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestReadProfileWeight: a pprof profile is weighed by its default sample
// type, else (none set, or one it does not have) by its last, as pprof
// itself picks; not by a "samples" type it also has. An off-CPU profile's
// 2 long waits and 30 short ones weigh what they blocked.
func TestReadProfileWeight(t *testing.T) {
	vt := func(typ, unit string) *profile.ValueType { return &profile.ValueType{Type: typ, Unit: unit} }
	count, offcpu, cpu := vt("samples", "count"), vt("offcpu", "microseconds"), vt("cpu", "nanoseconds")
	waits, blocked := [2]int64{2, 30}, [2]int64{900_000, 3_000}
	for _, c := range []struct {
		name       string
		data       []byte
		want       Weight
		wait, work int64
	}{
		{"offcpu default", weightProfile([]*profile.ValueType{count, offcpu}, "offcpu", nil, waits, blocked),
			Weight{Type: "offcpu", Unit: "microseconds"}, 900_000, 3_000},
		{"no default: the last", weightProfile([]*profile.ValueType{count, offcpu}, "", nil, waits, blocked),
			Weight{Type: "offcpu", Unit: "microseconds"}, 900_000, 3_000},
		{"unknown default: the last", weightProfile([]*profile.ValueType{count, offcpu}, "space", nil, waits, blocked),
			Weight{Type: "offcpu", Unit: "microseconds"}, 900_000, 3_000},
		{"default first", weightProfile([]*profile.ValueType{offcpu, count}, "offcpu", nil, blocked, waits),
			Weight{Type: "offcpu", Unit: "microseconds"}, 900_000, 3_000},
		{"cpu, sampled at a period", weightProfile([]*profile.ValueType{count, cpu}, "cpu", cpu, [2]int64{3, 1}, [2]int64{30_000_000, 10_000_000}),
			Weight{Type: "cpu", Unit: "nanoseconds", Periodic: true}, 30_000_000, 10_000_000},
		{"samples only", weightProfile([]*profile.ValueType{count}, "", nil, [2]int64{3, 1}),
			Weight{Type: "samples", Unit: "count"}, 3, 1},
	} {
		p, w, err := ReadProfile(bytes.NewReader(c.data))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var folded bytes.Buffer
		if err := WriteFolded(&folded, p); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("main (t.py:1);wait (t.py:2) %d\nmain (t.py:1);work (t.py:3) %d\n", c.wait, c.work)
		if w != c.want || folded.String() != want {
			t.Errorf("%s: weight %+v, stacks\n%s\nwant %+v,\n%s", c.name, w, folded.String(), c.want, want)
		}
	}
	// Folded text does not say: the zero Weight.
	if _, w, err := ReadProfile(strings.NewReader("main;wait 5\n")); err != nil || w != (Weight{}) || w.Known() {
		t.Errorf("folded: %+v, %v", w, err)
	}
}

// TestComparable: the same sample type compares, as do sample counts with
// a profile sampled at a fixed period, and folded stacks with anything;
// CPU time against blocked time, or counts against a profile not sampled
// at a period (offcpu's waits), do not, the error naming both.
func TestComparable(t *testing.T) {
	cpu := Weight{Type: "cpu", Unit: "nanoseconds", Periodic: true}
	wall := Weight{Type: "wall", Unit: "nanoseconds", Periodic: true}
	offcpu := Weight{Type: "offcpu", Unit: "microseconds"}
	count := Weight{Type: "samples", Unit: "count"}
	space := Weight{Type: "space", Unit: "bytes"}
	folded := Weight{}
	for _, c := range []struct {
		a, b Weight
		ok   bool
	}{
		{offcpu, offcpu, true}, {cpu, cpu, true}, {cpu, count, true}, {count, wall, true},
		{folded, offcpu, true}, {cpu, folded, true}, {folded, folded, true},
		{cpu, offcpu, false}, {offcpu, cpu, false}, {count, offcpu, false}, {offcpu, count, false},
		{cpu, wall, false}, {space, cpu, false}, {count, space, false},
	} {
		err := Comparable(c.a, c.b)
		if (err == nil) != c.ok {
			t.Errorf("%v against %v: %v, want comparable %v", c.a, c.b, err, c.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), c.a.String()) || !strings.Contains(err.Error(), c.b.String())) {
			t.Errorf("%v against %v: %q does not name both", c.a, c.b, err)
		}
	}
}

// TestDiffUnitsHeader: the header and the hover's unit name each side's
// weight; the pprof diff carries NEW's sample type.
func TestDiffUnitsHeader(t *testing.T) {
	base, newp := diffPair()
	offcpu := Weight{Type: "offcpu", Unit: "microseconds"}
	for _, c := range []struct {
		bw, nw     Weight
		head, unit string
	}{
		{offcpu, offcpu, "normalised by total offcpu µs (base 104, new 200)", "offcpu µs"},
		{Weight{}, offcpu, "normalised by each one's total (base 104 (folded stacks: unit not recorded), new 200 offcpu µs)", "offcpu µs"},
	} {
		var b bytes.Buffer
		if err := WriteDiffSVG(&b, base, newp, DiffOptions{BaseWeight: c.bw, NewWeight: c.nw}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.head) || !strings.Contains(b.String(), `data-unit="`+c.unit+`"`) {
			t.Errorf("%v → %v: header lacks %q or unit %q", c.bw, c.nw, c.head, c.unit)
		}
	}
	var b bytes.Buffer
	if err := WriteDiffPprof(&b, base, newp, DiffOptions{BaseWeight: offcpu, NewWeight: offcpu}); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.SampleType) != 1 || *pp.SampleType[0] != (profile.ValueType{Type: "offcpu", Unit: "microseconds"}) || pp.DefaultSampleType != "offcpu" {
		t.Errorf("pprof diff's sample types %v (default %q), want offcpu/microseconds", pp.SampleType, pp.DefaultSampleType)
	}
}

// FuzzReadProfile: no panic; an error comes with no profile; a profile
// comes with non-negative weights.
func FuzzReadProfile(f *testing.F) {
	base, newp := diffPair()
	var folded, pb bytes.Buffer
	_ = WriteFolded(&folded, base)
	_ = WritePprof(&pb, newp)
	f.Add(folded.Bytes())
	f.Add(pb.Bytes())
	f.Add([]byte("a;b 3\n\nc 1\r\n"))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, _, err := ReadProfile(bytes.NewReader(data))
		if err != nil {
			if p != nil {
				t.Fatal("error with a profile")
			}
			return
		}
		p.EachStack(func(s *Stack) {
			if s.Weight < 0 {
				t.Fatalf("negative weight %d", s.Weight)
			}
		})
		var b bytes.Buffer
		_ = WriteDiffSVG(&b, p, p, DiffOptions{})
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
