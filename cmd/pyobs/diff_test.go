package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/pyobs/pyobs/internal/testutil"
)

// diffTarget spends four fifths of its CPU in the function HOT names and
// the rest in the other one.
const diffTarget = `import os, time
def alpha(n):
    x = 0
    for i in range(n): x += i
def beta(n):
    x = 0
    for i in range(n): x += i
hot = os.environ["HOT"]
end = time.time() + 2.5
while time.time() < end:
    alpha(40000 if hot == "alpha" else 10000)
    beta(40000 if hot == "beta" else 10000)
`

// TestDiffRecordings records a real target twice, its hot function moved
// from alpha to beta (base as pprof, new as folded), and diffs them: in
// Chromium alpha is blue and beta red; the pprof diff loads in go tool
// pprof, beta grown and alpha shrunk, as -diff_base on the two recordings.
func TestDiffRecordings(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	script := filepath.Join(dir, "hot.py")
	if err := os.WriteFile(script, []byte(diffTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := func(hot, out string) string {
		path := filepath.Join(dir, out)
		argv := append([]string{"record", "-o", path, "--", "env", "HOT=" + hot}, append(in.Argv, script)...)
		if r := testutil.Run(t, 60*time.Second, argv...); r.Code != 0 {
			t.Fatalf("record %s: exit %d: %s", hot, r.Code, r.Stderr)
		}
		return path
	}
	base, newp := rec("alpha", "base.pb.gz"), rec("beta", "new.folded")
	svg := filepath.Join(dir, "diff.svg")
	if r := testutil.Run(t, 30*time.Second, "diff", base, newp, "-o", svg); r.Code != 0 {
		t.Fatalf("diff: exit %d: %s", r.Code, r.Stderr)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	// base is read in its CPU time, new (folded) in a unit it does not record.
	if !regexp.MustCompile(`normalised by each one's total \(base [0-9,]+ cpu ns, new [0-9,]+ \(folded stacks: unit not recorded\)\)`).Match(data) {
		t.Error("the SVG does not say how shares were normalised, in which units")
	}
	if bin := chromiumBin(); bin == "" {
		testutil.Skip(t, "no chromium to load the SVG in a browser (Debian: apt-get install -y chromium)")
	} else {
		fills := frameFills(t, bin, data, "alpha (", "beta (")
		if r, g, b := fills[0][0], fills[0][1], fills[0][2]; !(b > r+60 && b > g) {
			t.Errorf("alpha is drawn rgb(%d,%d,%d), want blue", r, g, b)
		}
		if r, g, b := fills[1][0], fills[1][1], fills[1][2]; !(r > b+60 && r > g) {
			t.Errorf("beta is drawn rgb(%d,%d,%d), want red", r, g, b)
		}
	}
	pb := filepath.Join(dir, "diff.pb.gz")
	if r := testutil.Run(t, 30*time.Second, "diff", base, newp, "--format", "pprof", "-o", pb); r.Code != 0 {
		t.Fatalf("diff --format pprof: exit %d: %s", r.Code, r.Stderr)
	}
	flat := func(args ...string) map[string]int64 {
		out, err := exec.Command("go", append([]string{"tool", "pprof", "-top", "-unit=ms"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
		}
		m := map[string]int64{}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 6 && (f[5] == "alpha" || f[5] == "beta") {
				v, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], "ms"), 64)
				m[f[5]] = int64(v)
			}
		}
		return m
	}
	if m := flat(pb); !(m["alpha"] < 0 && m["beta"] > 0) {
		t.Errorf("go tool pprof -top on the diff: alpha %d, beta %d; want alpha shrunk, beta grown", m["alpha"], m["beta"])
	}
	// The same direction as pprof's own -diff_base on the recordings (new's as pprof).
	newPB := rec("beta", "new.pb.gz")
	if m := flat("-diff_base="+base, newPB); !(m["alpha"] < 0 && m["beta"] > 0) {
		t.Errorf("go tool pprof -diff_base: alpha %d, beta %d", m["alpha"], m["beta"])
	}
}

// TestDiffUnits diffs real recordings of offcpu_waits.py io (its main,
// reader and sleeper threads block through the whole window, its burner
// runs): two offcpu pprofs are weighed by their default sample type,
// blocked microseconds, the header's totals those of the files' offcpu
// values as the pprof library reads them and at least the three blocked
// threads' window (a count of waits is some tens); the pprof diff is in
// offcpu/microseconds. A CPU recording against an off-CPU one is refused
// with one line naming both units; folded off-CPU stacks against a pprof
// are read, the header naming each side's unit.
func TestDiffUnits(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "offcpu_waits.py", "io")
	dir := t.TempDir()
	rec := func(args ...string) string {
		out := filepath.Join(dir, args[0])
		argv := append([]string{args[1], "-p", strconv.Itoa(tg.Pid), "-d", "1s", "-o", out}, args[2:]...)
		if r := testutil.Run(t, 60*time.Second, argv...); r.Code != 0 {
			t.Fatalf("%v: exit %d: %s", argv, r.Code, r.Stderr)
		}
		return out
	}
	offA, offB := rec("a.pb.gz", "offcpu"), rec("b.pb.gz", "offcpu")
	offFolded, cpu := rec("c.folded", "offcpu"), rec("cpu.pb.gz", "record")
	// What the pprof library says each file holds: its default type's total.
	truth := func(path string) (vt string, total int64) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pp, err := profile.Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		i, err := pp.SampleIndexByName("")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range pp.Sample {
			total += s.Value[i]
		}
		return pp.SampleType[i].Type + "/" + pp.SampleType[i].Unit, total
	}
	header := regexp.MustCompile(`normalised by ([^<]*)</text>`)
	diffSVG := func(base, newp string) string {
		out := filepath.Join(dir, "d.svg")
		if r := testutil.Run(t, 30*time.Second, "diff", base, newp, "-o", out); r.Code != 0 {
			t.Fatalf("diff %s %s: exit %d: %s", base, newp, r.Code, r.Stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		m := header.FindSubmatch(b)
		if m == nil {
			t.Fatalf("diff %s %s: no header", base, newp)
		}
		return string(m[1])
	}
	group := func(n int64) string { // as the header writes numbers: 3,021,007
		s := strconv.FormatInt(n, 10)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}

	ta, wa := truth(offA)
	tb, wb := truth(offB)
	if ta != "offcpu/microseconds" || tb != ta {
		t.Fatalf("offcpu's default sample types %s, %s", ta, tb)
	}
	for _, w := range []int64{wa, wb} {
		if w < 2_700_000 {
			t.Errorf("an offcpu recording holds %d µs; the target's three blocked threads alone block 3 s in its 1 s", w)
		}
	}
	if got, want := diffSVG(offA, offB), "total offcpu µs (base "+group(wa)+", new "+group(wb)+")"; got != want {
		t.Errorf("header: %q, want %q", got, want)
	}

	pb := filepath.Join(dir, "d.pb.gz")
	if r := testutil.Run(t, 30*time.Second, "diff", offA, offB, "--format", "pprof", "-o", pb); r.Code != 0 {
		t.Fatalf("diff --format pprof: exit %d: %s", r.Code, r.Stderr)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var pos int64
	for _, s := range dp.Sample {
		if !s.HasLabel("pprof::base", "true") {
			pos += s.Value[0]
		}
	}
	var types []string
	for _, st := range dp.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if strings.Join(types, " ") != "offcpu/microseconds" || pos != wb {
		t.Errorf("pprof diff: sample types %v, new's values %d; want offcpu/microseconds and %d", types, pos, wb)
	}

	tc, _ := truth(cpu)
	if tc != "cpu/nanoseconds" {
		t.Fatalf("record's default sample type %s", tc)
	}
	for _, pair := range [][2]string{{cpu, offA}, {offA, cpu}} {
		r := testutil.Run(t, 30*time.Second, "diff", pair[0], pair[1], "-o", filepath.Join(dir, "x.svg"))
		if r.Code != exitError || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
			!strings.Contains(r.Stderr, "cpu/nanoseconds") || !strings.Contains(r.Stderr, "offcpu/microseconds") {
			t.Errorf("diff %s %s: exit %d, stderr %q; want %d and one line naming both units", pair[0], pair[1], r.Code, r.Stderr, exitError)
		}
	}

	if got := diffSVG(offFolded, offA); !strings.HasSuffix(got, ", new "+group(wa)+" offcpu µs)") || !strings.Contains(got, "unit not recorded") {
		t.Errorf("folded against pprof: header %q; want each side's unit, new's %s offcpu µs", got, group(wa))
	}
}

func TestDiffUsage(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.folded")
	if err := os.WriteFile(f, []byte("main;work 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.folded")
	if err := os.WriteFile(bad, []byte("main;work three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"diff", f}, exitUsage, "want two recordings"},
		{[]string{"diff", f, f, "--format", "folded"}, exitUsage, "not a diff format"},
		{[]string{"diff", f, f, "--format", "pprof"}, exitUsage, "give -o FILE"},
		{[]string{"diff", f, filepath.Join(dir, "missing")}, exitUsage, "can't open " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{[]string{"diff", f, f, "-o", filepath.Join(dir, "d.png")}, exitUsage, "give --format (svg, pprof)"},
		{[]string{"diff", f, bad}, exitUsage, "line 1"},
		{[]string{"diff", f, dir}, exitUsage, "is a directory, not a recording"},
	} {
		r := testutil.Run(t, 10*time.Second, c.args...)
		if r.Code != c.code || !strings.Contains(r.Stderr, c.says) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line saying %q", c.args, r.Code, r.Stderr, c.code, c.says)
		}
	}
	if r := testutil.Run(t, 10*time.Second, "diff", f, f); r.Code != 0 || !strings.Contains(r.Stdout, "no frame's share moved") {
		t.Errorf("diff of a recording with itself: exit %d: %s", r.Code, r.Stderr)
	}
}

func chromiumBin() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// frameFills loads svg in headless Chromium and returns the computed fill
// (r, g, b) of the heaviest frame (new's samples plus base's) whose label
// starts with each prefix. The heaviest, not the first: a function sampled
// on a rare line in one recording only (alpha at "x = 0") is a frame of its
// own, rightly drawn as new, and it sorts before the line that holds the
// function's time.
func frameFills(t *testing.T, bin string, svg []byte, prefixes ...string) [][3]int {
	t.Helper()
	pj, _ := json.Marshal(prefixes)
	script := `(function () {
var svg = document.querySelector('svg.pyobs-flame'), out = [];
PREFIXES.forEach(function (p) {
  var g = null, w = -1;
  [].forEach.call(svg.querySelectorAll('g.frame'), function (f) {
    var fw = +f.getAttribute('data-weight') + +f.getAttribute('data-base');
    if (f.getAttribute('data-label').indexOf(p) == 0 && fw > w) { g = f; w = fw; }
  });
  out.push(g ? getComputedStyle(g.querySelector('rect')).fill : 'none');
});
var t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
t.setAttribute('id', 'pyobs-test-result'); t.textContent = encodeURIComponent(JSON.stringify(out)); svg.appendChild(t);
})();`
	doc := string(svg)
	end := strings.LastIndex(doc, "</svg>")
	doc = doc[:end] + "<script><![CDATA[\n" + strings.Replace(script, "PREFIXES", string(pj), 1) + "\n]]></script>\n" + doc[end:]
	path := filepath.Join(t.TempDir(), "diff.svg")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	js := testutil.ChromiumResult(t, bin, path, "pyobs-test-result")
	var fills []string
	if err := json.Unmarshal([]byte(js), &fills); err != nil {
		t.Fatal(err)
	}
	rgb := regexp.MustCompile(`^rgb\((\d+), (\d+), (\d+)\)$`)
	var res [][3]int
	for i, f := range fills {
		c := rgb.FindStringSubmatch(f)
		if c == nil {
			t.Fatalf("frame %q: fill %q", prefixes[i], f)
		}
		var v [3]int
		for j := range v {
			v[j], _ = strconv.Atoi(c[j+1])
		}
		res = append(res, v)
	}
	return res
}
