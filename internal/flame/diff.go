package flame

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/pprof/profile"
)

// Weight says what a recording's weights measure: the pprof sample type
// they were read from (Type "cpu", Unit "nanoseconds"), or nothing for
// folded stacks, which do not record their unit.
type Weight struct {
	Type, Unit string
	// Periodic: the profile was sampled at a fixed period in this type and
	// also counts its samples (samples/count), so its weights and its
	// sample counts are in proportion: it compares with a samples/count
	// recording.
	Periodic bool
}

// Known: the recording said what its weights are.
func (w Weight) Known() bool { return w.Unit != "" }

func (w Weight) isCount() bool { return w.Type == "samples" && w.Unit == "count" }

// String names the weight as pprof does, "TYPE/UNIT".
func (w Weight) String() string {
	if !w.Known() {
		return "folded stacks (unit not recorded)"
	}
	return w.Type + "/" + w.Unit
}

// short is the weight's name beside a number: "samples", "offcpu µs".
func (w Weight) short() string {
	switch {
	case !w.Known():
		return "(folded stacks: unit not recorded)"
	case w.isCount():
		return "samples"
	}
	u := map[string]string{"nanoseconds": "ns", "microseconds": "µs", "milliseconds": "ms", "seconds": "s"}[w.Unit]
	if u == "" {
		u = w.Unit
	}
	return w.Type + " " + u
}

// Comparable says whether two recordings' weights measure the same thing,
// so that their shares compare: the same pprof sample type, or sample
// counts against a profile sampled at a fixed period (its time is its
// count times the period). Folded stacks do not say: they compare with
// anything (the diff's output names each side's unit). The error names
// both weights.
func Comparable(base, newp Weight) error {
	switch {
	case !base.Known() || !newp.Known():
		return nil
	case base.Type == newp.Type && base.Unit == newp.Unit:
		return nil
	case base.isCount() && newp.Periodic, newp.isCount() && base.Periodic:
		return nil
	}
	return fmt.Errorf("base is weighed in %s, new in %s: they measure different things", base, newp)
}

// ReadProfile reads a recording, pyobs's or another tool's, telling its
// format by content: gzip or protocol buffer bytes are pprof, text is
// folded stacks ("FRAME;FRAME WEIGHT" lines). From pprof the weight is the
// profile's default sample type, else its last one (pprof's own rule, as
// go tool pprof shows it): an off-CPU profile's blocked microseconds, not
// its count of waits; the Weight returned says which. Folded text does not
// record its unit: its Weight is the zero one. A sample's "process" and
// "thread" labels become its root frames and its "state" label its leaf,
// as WritePprof wrote them. Errors name what both readings said (never a
// partial profile).
func ReadProfile(r io.Reader) (*Profile, Weight, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, Weight{}, fmt.Errorf("can't read profile: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, Weight{}, errors.New("can't read profile: it is empty")
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b { // gzip: pprof
		return readPprof(data)
	}
	p, ferr := ReadFolded(bytes.NewReader(data))
	if ferr == nil {
		p.Meta.Command = "folded"
		return p, Weight{}, nil
	}
	p, w, perr := readPprof(data) // an uncompressed protocol buffer
	if perr == nil {
		return p, w, nil
	}
	if utf8.Valid(data) { // text: the folded reading's complaint is the useful one
		return nil, Weight{}, ferr
	}
	return nil, Weight{}, perr
}

func readPprof(data []byte) (*Profile, Weight, error) {
	pp, err := profile.ParseData(data)
	if err != nil {
		return nil, Weight{}, fmt.Errorf("can't read profile: neither folded stacks nor pprof: %w", err)
	}
	vi, err := pp.SampleIndexByName("") // the default sample type, else the last
	if err != nil || vi < 0 {
		return nil, Weight{}, errors.New("can't read pprof profile: it has no sample types")
	}
	st := pp.SampleType[vi]
	wt := Weight{Type: st.Type, Unit: st.Unit}
	if pt := pp.PeriodType; pt != nil && pp.Period > 0 && pt.Type == st.Type && pt.Unit == st.Unit {
		for _, t := range pp.SampleType {
			wt.Periodic = wt.Periodic || t.Type == "samples" && t.Unit == "count"
		}
	}
	unit := "samples"
	if st.Unit == "microseconds" || st.Unit == "bytes" {
		unit = st.Unit
	}
	p := New(Meta{Command: "pprof", Unit: unit})
	var ids []int
	for n, s := range pp.Sample {
		if vi >= len(s.Value) {
			return nil, Weight{}, fmt.Errorf("can't read pprof profile: sample %d has %d values, want %d", n, len(s.Value), len(pp.SampleType))
		}
		w := s.Value[vi]
		if w < 0 {
			return nil, Weight{}, fmt.Errorf("can't read pprof profile: sample %d weighs %d (a difference? give the two recordings)", n, w)
		}
		if w == 0 {
			continue
		}
		ids = ids[:0]
		for _, t := range s.Label["process"] {
			ids = append(ids, p.Intern(Frame{Kind: Thread, Function: t}))
		}
		for _, t := range s.Label["thread"] {
			ids = append(ids, p.Intern(Frame{Kind: Thread, Function: t}))
		}
		for i := len(s.Location) - 1; i >= 0; i-- {
			l := s.Location[i]
			if len(l.Line) == 0 {
				ids = append(ids, p.Intern(Frame{Kind: Native, Function: "[unknown] (0x" + strconv.FormatUint(l.Address, 16) + ")"}))
			}
			for j := len(l.Line) - 1; j >= 0; j-- { // Line[0] is the innermost inlined
				ids = append(ids, p.Intern(pprofFrame(l, l.Line[j])))
			}
		}
		for _, st := range s.Label["state"] {
			ids = append(ids, p.Intern(Frame{Kind: State, Function: st}))
		}
		if len(ids) == 0 {
			ids = append(ids, p.Intern(Frame{Kind: State, Function: "[no frames]"}))
		}
		p.AddIDs(ids, w)
	}
	return p, wt, nil
}

func pprofFrame(l *profile.Location, ln profile.Line) Frame {
	if ln.Function == nil {
		return Frame{Kind: Native, Function: "[unknown]"}
	}
	name := ln.Function.Name
	if fn, ok := strings.CutSuffix(name, "_[k]"); ok {
		return Frame{Kind: Kernel, Function: fn}
	}
	if l.Mapping == nil && ln.Function.Filename != "" && ln.Line > 0 && ln.Line <= math.MaxInt32 {
		return Frame{Kind: Python, Function: name, File: ln.Function.Filename, Line: int(ln.Line)}
	}
	return Frame{Kind: Native, Function: name}
}

// difftrie holds the base's weight at each path of labels.
type difftrie struct {
	w    int64
	kids map[string]*difftrie
}

func (t *difftrie) kid(label string) *difftrie {
	if t == nil {
		return nil
	}
	return t.kids[label]
}

// diffKey is the label a frame is matched by across recordings: a thread
// root's TID differs from run to run, so "NAME (TID)" matches "NAME (…)"
// and "thread TID" any "thread …" (folded text cannot tell a thread frame
// from a native one, so any label ending in " (DIGITS)" is taken so); a
// process root's pid too: "[pid PID] ARGV" matches "[pid …] ARGV".
func diffKey(label string) string {
	if i := strings.LastIndex(label, " ("); i > 0 && strings.HasSuffix(label, ")") && allDigits(label[i+2:len(label)-1]) {
		return label[:i] + " (…)"
	}
	if rest, ok := strings.CutPrefix(label, "[pid "); ok {
		if pid, argv, ok := strings.Cut(rest, "]"); ok && allDigits(pid) {
			return "[pid …]" + argv
		}
	}
	if rest, ok := strings.CutPrefix(label, "thread "); ok && allDigits(rest) {
		return "thread …"
	}
	return label
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func baseTrie(p *Profile) *difftrie {
	root := &difftrie{}
	labels := make([]string, p.NumFrames())
	for i := range labels {
		labels[i] = diffKey(xmlSafe(p.Frame(i).Label()))
	}
	p.EachStack(func(s *Stack) {
		n := root
		n.w += s.Weight
		for _, id := range s.Frames {
			k := n.kids[labels[id]]
			if k == nil {
				if n.kids == nil {
					n.kids = map[string]*difftrie{}
				}
				k = &difftrie{}
				n.kids[labels[id]] = k
			}
			k.w += s.Weight
			n = k
		}
	})
	return root
}

// svgDiff is what WriteDiffSVG adds to a flame graph: per drawn frame the
// base's weight at the same path and a colour class by the change of its
// share; header lines, legend, CSS and a hover script.
type svgDiff struct {
	base         [][]int64  // by depth and frame: the base's weight at the frame's path
	cls          [][]string // by depth and frame: colour class
	line1, line2 string
	css, script  string
	unit         string // what the hover's numbers are, for data-unit
}

const diffShades = 8

// diffShare: shares that moved less than this (of the total) are "unchanged".
const diffShare = 0.001

func newSVGDiff(lay *svgLayout, base *Profile, newTotal int64, o DiffOptions) *svgDiff {
	d := &svgDiff{unit: o.NewWeight.short()}
	bt := baseTrie(base)
	nodes := [][]*difftrie{{bt}}
	d.base = [][]int64{{bt.w}}
	type change struct {
		label string
		delta float64
	}
	var grew, shrank change
	var maxAbs float64
	deltas := make([][]float64, len(lay.levels))
	deltas[0] = []float64{0}
	share := func(w, total int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(w) / float64(total)
	}
	for dep := 1; dep < len(lay.levels); dep++ {
		parents, pnodes := lay.levels[dep-1], nodes[dep-1]
		lv := lay.levels[dep]
		nodes = append(nodes, make([]*difftrie, len(lv)))
		d.base = append(d.base, make([]int64, len(lv)))
		deltas[dep] = make([]float64, len(lv))
		j := 0
		for i, r := range lv {
			// The parent is the frame one level down that spans r's start
			// (both levels are in offset order).
			for j < len(parents)-1 && parents[j].off+parents[j].w <= r.off {
				j++
			}
			label := lay.keys[r.rank].label
			n := pnodes[j].kid(diffKey(label))
			nodes[dep][i] = n
			if n != nil {
				d.base[dep][i] = n.w
			}
			delta := share(r.w, newTotal) - share(d.base[dep][i], bt.w)
			deltas[dep][i] = delta
			maxAbs = max(maxAbs, math.Abs(delta))
			// Ties go to the deeper frame (the levels go up): the
			// function, rather than the caller that only passes it on.
			if delta > 0 && delta >= grew.delta {
				grew = change{label, delta}
			}
			if delta < 0 && delta <= shrank.delta {
				shrank = change{label, delta}
			}
		}
	}
	d.cls = make([][]string, len(deltas))
	for dep, lv := range deltas {
		d.cls[dep] = make([]string, len(lv))
		for i, delta := range lv {
			d.cls[dep][i] = "d0"
			if math.Abs(delta) < diffShare || maxAbs == 0 {
				continue
			}
			shade := int(math.Ceil(math.Abs(delta) / maxAbs * diffShades))
			shade = min(max(shade, 1), diffShades)
			if delta > 0 {
				d.cls[dep][i] = "dg" + strconv.Itoa(shade)
			} else {
				d.cls[dep][i] = "ds" + strconv.Itoa(shade)
			}
		}
	}
	// The base's weight on stacks NEW's graph does not draw: under a
	// drawn frame, the base's children that no drawn frame matched.
	matched := map[*difftrie]bool{}
	for _, lv := range nodes {
		for _, n := range lv {
			matched[n] = true
		}
	}
	var notDrawn int64
	for n := range matched {
		if n == nil {
			continue
		}
		for _, k := range n.kids {
			if !matched[k] {
				notDrawn += k.w
			}
		}
	}
	pp := func(x float64) string { return fmt.Sprintf("%+.2f pp", 100*x) }
	// Each side's total with the unit it was read in: the same unit once,
	// else both (one may be folded stacks, which do not record theirs).
	bw, nw := o.BaseWeight, o.NewWeight
	totals := fmt.Sprintf("total %s (base %s, new %s)", nw.short(), group(bt.w), group(newTotal))
	if bw != nw || !bw.Known() {
		totals = fmt.Sprintf("each one's total (base %s %s, new %s %s)", group(bt.w), bw.short(), group(newTotal), nw.short())
	}
	d.line1 = fmt.Sprintf("%s → %s · colour: change in share of the total, red grew, blue shrank · normalised by %s",
		o.Base, o.New, totals)
	var b []string
	if grew.label != "" {
		b = append(b, "most grown: "+grew.label+" "+pp(grew.delta))
	}
	if shrank.label != "" {
		b = append(b, "most shrunk: "+shrank.label+" "+pp(shrank.delta))
	}
	if notDrawn > 0 {
		of := "base's total is"
		if bw.isCount() {
			of = "base's samples are"
		}
		b = append(b, fmt.Sprintf("%.2f%% of %s on stacks new's graph does not draw", 100*share(notDrawn, bt.w), of))
	}
	if len(b) == 0 {
		b = append(b, "no frame's share moved")
	}
	d.line2 = strings.Join(b, " · ")
	var css strings.Builder
	css.WriteString(".d0>rect{fill:#e8e8e8}\n")
	for i := 1; i <= diffShades; i++ {
		l := 0.92 - 0.05*float64(i)
		fmt.Fprintf(&css, ".dg%d>rect{fill:%s}\n.ds%d>rect{fill:%s}\n", i, hslHex(0, .85, l), i, hslHex(220, .85, l))
	}
	d.css = css.String()
	// Hover: both values. Runs after svg.js's own handler (registered
	// later), so its text is the one shown.
	d.script = fmt.Sprintf(`(function () {
var cs = document.currentScript, svg = cs && cs.closest ? cs.closest('svg') : document.querySelectorAll('svg.pyobs-flame')[0];
var BT = %d, NT = %d, st = svg.querySelector('.status');
function pc(w, t) { return (t ? 100 * w / t : 0).toFixed(2) + '%%'; }
svg.addEventListener('mouseover', function (e) {
var g = e.target.closest && e.target.closest('g.frame'); if (!g) return;
var w = +g.getAttribute('data-weight'), b = +g.getAttribute('data-base'), d = (NT ? w / NT : 0) - (BT ? b / BT : 0);
st.textContent = g.getAttribute('data-label') + ' \u2014 new ' + w.toLocaleString('en-US') + ' (' + pc(w, NT) + '), base ' + b.toLocaleString('en-US') + ' (' + pc(b, BT) + '), ' + (d >= 0 ? '+' : '') + (100 * d).toFixed(2) + ' pp';
});
})();
`, bt.w, newTotal)
	return d
}

// DiffOptions name the two recordings in a differential graph's header
// and what their weights are (ReadProfile's Weight; the zero one for
// folded stacks: the header says their unit was not recorded).
type DiffOptions struct {
	Title                 string
	Base, New             string // names (file paths) of the recordings
	BaseWeight, NewWeight Weight
	Icicle                bool
}

// WriteDiffSVG writes a differential flame graph: newp's shape (its frames
// and widths, as WriteSVG draws it), each frame coloured by how its share
// of the total changed from base at the same path of labels (thread
// roots matched by name, not TID; see diffKey) (red grew,
// blue shrank, the strongest change the deepest colour; grey: moved less
// than 0.1 % of the total). Shares are normalised by each recording's
// total, and the header says so, with the unit each side was read in.
// Each frame carries data-base (the base's
// weight at its path); hovering shows both values and the change.
func WriteDiffSVG(w io.Writer, base, newp *Profile, o DiffOptions) error {
	lay := layoutSVG(newp)
	title := o.Title
	if title == "" {
		title = "pyobs diff"
	}
	opts := SVGOptions{Title: title, Icicle: o.Icicle, diff: newSVGDiff(lay, base, lay.total, o)}
	sw := &svgWriter{w: bufio.NewWriterSize(w, 256<<10)}
	sw.write(newp, lay, opts)
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	if sw.err != nil {
		return fmt.Errorf("can't write svg: %w", sw.err)
	}
	return nil
}

// WriteDiffPprof writes one pprof profile holding newp's samples and
// base's, scaled to newp's total and negated, each base sample labelled
// pprof::base=true: the profile `go tool pprof -diff_base=BASE NEW` builds
// and saves (its documented form), so `go tool pprof -top FILE` shows the
// change directly, percentages of NEW's total. Its one sample type is
// NEW's weight (o.NewWeight; samples/count for folded stacks, which do not
// say), the scaled base's being in NEW's unit too; a comment names both.
func WriteDiffPprof(w io.Writer, base, newp *Profile, o DiffOptions) error {
	vt := &profile.ValueType{Type: "samples", Unit: "count"}
	if o.NewWeight.Known() {
		vt = &profile.ValueType{Type: o.NewWeight.Type, Unit: o.NewWeight.Unit}
	}
	flat := func(p *Profile) (*profile.Profile, error) {
		q := *p
		q.Meta = Meta{Command: "diff", Unit: "samples"} // one sample type, then named as NEW's
		pp, err := toPprof(&q)
		if err == nil {
			pp.SampleType, pp.DefaultSampleType = []*profile.ValueType{vt}, vt.Type
			pp.PeriodType, pp.Period = &profile.ValueType{Type: vt.Type, Unit: vt.Unit}, 1
		}
		return pp, err
	}
	pn, err := flat(newp)
	if err != nil {
		return err
	}
	pb, err := flat(base)
	if err != nil {
		return err
	}
	nt, bt := newp.Total(), base.Total()
	ratio := 0.0
	if bt > 0 {
		ratio = float64(nt) / float64(bt)
	}
	kept := pb.Sample[:0]
	for _, s := range pb.Sample {
		s.Value[0] = -int64(math.Round(float64(s.Value[0]) * ratio))
		if s.Value[0] == 0 {
			continue
		}
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		s.Label["pprof::base"] = []string{"true"}
		kept = append(kept, s)
	}
	pb.Sample = kept
	merged, err := profile.Merge([]*profile.Profile{pn, pb})
	if err != nil {
		return fmt.Errorf("can't merge the two recordings: %w", err)
	}
	merged.Comments = []string{fmt.Sprintf("pyobs diff: new (%d, %s) minus base (%d, %s, scaled by %.4f to new's total); base samples are labelled pprof::base=true",
		nt, o.NewWeight, bt, o.BaseWeight, ratio)}
	if err := merged.CheckValid(); err != nil {
		return fmt.Errorf("can't write pprof: %w", err)
	}
	if err := merged.Write(w); err != nil {
		return fmt.Errorf("can't write pprof: %w", err)
	}
	return nil
}
