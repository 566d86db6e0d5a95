package flame

import (
	"bufio"
	_ "embed"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// SVGOptions shape WriteSVG's picture.
type SVGOptions struct {
	Title  string   // heading; empty: "pyobs <command> --mode <mode> -p <pid>"
	Icicle bool     // root at the top (icicle graph) instead of the bottom
	diff   *svgDiff // WriteDiffSVG's colours, header and hover (diff.go)
}

// Geometry of the picture, in px. The JS reads what it needs from data-*
// attributes on the root element, so these are the only copy.
const (
	svgWidth   = 1200
	svgPad     = 10                  // left and right margin
	svgFrameW  = svgWidth - 2*svgPad // width of the root frame
	svgFrameH  = 16                  // one level, 1 px of it a gap
	svgTop     = 92                  // first level's y (header above)
	svgBottom  = 28                  // status line below the levels
	svgMinPx   = 0.1                 // narrower frames are not drawn
	svgCharW   = 7.2                 // 12 px monospace advance (0.6 em)
	svgShades  = 8                   // colour variations per kind
	svgRootKey = "all"
)

//go:embed svg.js
var svgJSSource string

// svgJS is svg.js with comment lines and indentation dropped, made at the
// first SVG written.
var svgJS = sync.OnceValue(func() string {
	var b strings.Builder
	for _, l := range strings.Split(svgJSSource, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if strings.Contains(b.String(), "]]>") {
		panic("flame: svg.js contains ]]>")
	}
	return b.String()
})

// WriteSVG writes p as a self-contained interactive flame graph (icicle
// with opts.Icicle): one <g class="frame"> per drawn frame with a <rect>
// and a <text> (the label cut to fit), data-label, data-weight and
// data-off (its start, in weight units) attributes, inside one
// <g class="level" data-depth="D"> per depth; the root frame "all" is at
// depth 0. Hovering shows label, weight and share of the total in the
// status line, a click zooms into a frame (Escape or "Reset zoom" undoes
// it), the search box (class "search") highlights frames whose label
// matches a regex (or substring) and shows "matched: X%", counting each
// sample once even under recursion. Frames are coloured by kind: Python
// warm, native blue, kernel green, thread purple, state grey.
//
// Siblings are sorted by label and merged by label, as in any flame graph.
// Frames narrower than 0.1 px at full width are not drawn (their weight
// still counts in their parent); the header says how many. The header
// also carries Meta: mode, samples, duration, requested and achieved rate,
// lost, torn, failed and throttled counts.
func WriteSVG(w io.Writer, p *Profile, opts SVGOptions) error {
	lay := layoutSVG(p)
	sw := &svgWriter{w: bufio.NewWriterSize(w, 256<<10)}
	sw.write(p, lay, opts)
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	if sw.err != nil {
		return fmt.Errorf("can't write svg: %w", sw.err)
	}
	return nil
}

// svgRect is one drawn frame.
type svgRect struct {
	rank   int32 // index into svgLayout.keys; -1 for the root
	off, w int64 // extent in weight units
}

type svgLayout struct {
	total   int64
	keys    []svgKey    // frames by rank: sorted by label, then kind
	levels  [][]svgRect // by depth (0: the root), each sorted by off
	omitted int         // frames too narrow to draw
}

type svgKey struct {
	label    string // sanitised for XML
	kind     Kind
	function string
}

// layoutSVG folds the stacks into the drawn frames. It sorts the stacks by
// their labels (as ranks), then sweeps them once keeping the open path: a
// frame closes when the next stack leaves it, and is kept only if it is
// wide enough. Memory: the stacks' ranks plus the drawn frames.
func layoutSVG(p *Profile) *svgLayout {
	lay := &svgLayout{}
	// Rank every frame by (label, kind): equal labels share a rank.
	nf := p.NumFrames()
	keys := make([]svgKey, nf)
	order := make([]int, nf)
	for i := range keys {
		f := p.Frame(i)
		keys[i] = svgKey{label: xmlSafe(f.Label()), kind: f.Kind, function: f.Function}
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		ka, kb := keys[order[a]], keys[order[b]]
		if ka.label != kb.label {
			return ka.label < kb.label
		}
		return ka.kind < kb.kind
	})
	rank := make([]int32, nf)
	for i, id := range order {
		k := keys[id]
		if i == 0 || k.label != lay.keys[len(lay.keys)-1].label || k.kind != lay.keys[len(lay.keys)-1].kind {
			lay.keys = append(lay.keys, k)
		}
		rank[id] = int32(len(lay.keys) - 1)
	}

	// The stacks as rank sequences, in one backing array.
	type rstack struct {
		ranks  []int32
		weight int64
	}
	var nranks int
	p.EachStack(func(s *Stack) { nranks += len(s.Frames) })
	backing := make([]int32, 0, nranks)
	stacks := make([]rstack, 0, p.NumStacks())
	p.EachStack(func(s *Stack) {
		start := len(backing)
		for _, id := range s.Frames {
			backing = append(backing, rank[id])
		}
		stacks = append(stacks, rstack{backing[start:len(backing):len(backing)], s.Weight})
		lay.total += s.Weight
	})
	slices.SortFunc(stacks, func(a, b rstack) int { return slices.Compare(a.ranks, b.ranks) })

	lay.levels = [][]svgRect{{{rank: -1, off: 0, w: lay.total}}}
	if lay.total <= 0 {
		return lay
	}
	minW := svgMinPx * float64(lay.total) / svgFrameW // in weight units
	type open struct {
		rank  int32
		start int64
	}
	var path []open
	var off int64
	closeTo := func(depth int) { // close path[depth:]
		for d := len(path) - 1; d >= depth; d-- {
			o := path[d]
			if w := off - o.start; w > 0 && float64(w) >= minW {
				for len(lay.levels) <= d+1 {
					lay.levels = append(lay.levels, nil)
				}
				lay.levels[d+1] = append(lay.levels[d+1], svgRect{rank: o.rank, off: o.start, w: w})
			} else if w > 0 {
				lay.omitted++
			}
		}
		path = path[:depth]
	}
	for _, s := range stacks {
		common := 0
		for common < len(path) && common < len(s.ranks) && path[common].rank == s.ranks[common] {
			common++
		}
		closeTo(common)
		for _, r := range s.ranks[common:] {
			path = append(path, open{r, off})
		}
		off += s.weight
	}
	closeTo(0)
	// The path holds one frame per depth, so a frame at depth d closes
	// before the next one at d opens: each level is in offset order.
	return lay
}

type svgWriter struct {
	w   *bufio.Writer
	err error
	b   []byte
}

func (s *svgWriter) str(v string) {
	if s.err == nil {
		_, s.err = s.w.WriteString(v)
	}
}

func (s *svgWriter) flush() {
	if s.err == nil {
		_, s.err = s.w.Write(s.b)
	}
	s.b = s.b[:0]
}

func (s *svgWriter) write(p *Profile, lay *svgLayout, opts SVGOptions) {
	m := p.Meta
	maxDepth := len(lay.levels) - 1
	height := svgTop + (maxDepth+1)*svgFrameH + svgBottom
	unit := "samples"
	if m.Unit == "microseconds" {
		unit = "µs"
	}
	if opts.diff != nil {
		unit = opts.diff.unit
	}
	title := opts.Title
	if title == "" {
		title = profileName(m)
	}
	icicle := "0"
	if opts.Icicle {
		icicle = "1"
	}
	s.str(`<?xml version="1.0" encoding="UTF-8" standalone="no"?>` + "\n")
	s.str(fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" version="1.1" class="pyobs-flame" width="%d" height="%d" viewBox="0 0 %d %d"`,
		svgWidth, height, svgWidth, height))
	s.str(fmt.Sprintf(` data-total="%d" data-unit="%s" data-fx="%d" data-fw="%d" data-top="%d" data-fh="%d" data-maxdepth="%d" data-cw="%s" data-icicle="%s">`+"\n",
		lay.total, appendXMLEscaped(nil, xmlSafe(unit)), svgPad, svgFrameW, svgTop, svgFrameH, maxDepth, strconv.FormatFloat(svgCharW, 'f', -1, 64), icicle))
	css := svgCSS()
	if opts.diff != nil {
		css += opts.diff.css
	}
	s.str("<style><![CDATA[\n" + css + "]]></style>\n")
	s.str(`<rect class="bg" width="100%" height="100%"/>` + "\n")
	s.text("title", svgWidth/2, 22, title)
	line1, line2, warn := svgMetaLines(m, lay)
	if opts.diff != nil {
		line1, line2, warn = opts.diff.line1, opts.diff.line2, false
	}
	s.text("meta", svgWidth/2, 40, line1)
	cls := "meta"
	if warn {
		cls = "meta warn"
	}
	s.text(cls, svgWidth/2, 56, line2)
	s.str(`<text class="btn reset hide" x="10" y="78">Reset zoom</text>` + "\n")
	toggle := "Icicle"
	if opts.Icicle {
		toggle = "Flame"
	}
	s.str(`<text class="btn toggle" x="110" y="78">` + toggle + "</text>\n")
	s.str(`<g class="legend">`)
	legend := []struct{ cls, name string }{{"p3", "Python"}, {"n3", "native"}, {"k3", "kernel"}, {"t3", "thread"}, {"s3", "state"}}
	if opts.diff != nil {
		legend = []struct{ cls, name string }{{"dg6", "grew"}, {"ds6", "shrank"}, {"d0", "unchanged"}}
	}
	for i, l := range legend {
		x := 200 + i*90
		s.str(fmt.Sprintf(`<g class="%s"><rect x="%d" y="68" width="12" height="12"/><text x="%d" y="78">%s</text></g>`, l.cls, x, x+16, l.name))
	}
	s.str("</g>\n")
	s.str(`<text class="matched" x="930" y="78"></text>` + "\n")
	s.str(`<foreignObject x="940" y="63" width="250" height="24"><input xmlns="http://www.w3.org/1999/xhtml" class="search" type="search" placeholder="search (regex)" style="width:240px;font:12px monospace"/></foreignObject>` + "\n")

	s.str(`<g class="frames">` + "\n")
	scale := 0.0
	if lay.total > 0 {
		scale = float64(svgFrameW) / float64(lay.total)
	}
	for d, lv := range lay.levels {
		y := svgTop + (maxDepth-d)*svgFrameH
		if opts.Icicle {
			y = svgTop + d*svgFrameH
		}
		s.str(fmt.Sprintf(`<g class="level" data-depth="%d" transform="translate(0,%d)">`+"\n", d, y))
		for i, r := range lv {
			label, cls := svgRootKey, "r"
			if r.rank >= 0 {
				k := lay.keys[r.rank]
				label, cls = k.label, svgClass(k)
			}
			if opts.diff != nil {
				cls = opts.diff.cls[d][i]
			}
			x := svgPad + float64(r.off)*scale
			wpx := float64(r.w) * scale
			if r.rank < 0 {
				x, wpx = svgPad, svgFrameW
			}
			s.b = append(s.b, `<g class="frame `...)
			s.b = append(s.b, cls...)
			s.b = append(s.b, `" data-label="`...)
			s.b = appendXMLEscaped(s.b, label)
			s.b = append(s.b, `" data-weight="`...)
			s.b = strconv.AppendInt(s.b, r.w, 10)
			s.b = append(s.b, `" data-off="`...)
			s.b = strconv.AppendInt(s.b, r.off, 10)
			if opts.diff != nil {
				s.b = append(s.b, `" data-base="`...)
				s.b = strconv.AppendInt(s.b, opts.diff.base[d][i], 10)
			}
			s.b = append(s.b, `"><rect x="`...)
			s.b = strconv.AppendFloat(s.b, x, 'f', 2, 64)
			s.b = append(s.b, `" width="`...)
			s.b = strconv.AppendFloat(s.b, wpx, 'f', 2, 64)
			s.b = append(s.b, `" height="`...)
			s.b = strconv.AppendInt(s.b, svgFrameH-1, 10)
			s.b = append(s.b, `"/><text x="`...)
			s.b = strconv.AppendFloat(s.b, x+3, 'f', 2, 64)
			s.b = append(s.b, `" y="11.5">`...)
			s.b = appendXMLEscaped(s.b, svgFit(label, wpx))
			s.b = append(s.b, "</text></g>\n"...)
			if len(s.b) > 64<<10 {
				s.flush()
			}
		}
		s.flush()
		s.str("</g>\n")
	}
	s.str("</g>\n")
	s.text("status", svgPad, height-10, "hover a frame for details, click to zoom, Esc to reset, Ctrl-F to search")
	s.str("<script><![CDATA[\n" + svgJS() + "]]></script>\n")
	if opts.diff != nil {
		s.str("<script><![CDATA[\n" + opts.diff.script + "]]></script>\n")
	}
	s.str("</svg>\n")
}

func (s *svgWriter) text(class string, x, y int, content string) {
	anchor := ""
	if x == svgWidth/2 {
		anchor = ` text-anchor="middle"`
	}
	s.b = append(s.b, `<text class="`...)
	s.b = append(s.b, class...)
	s.b = append(s.b, fmt.Sprintf(`" x="%d" y="%d"%s>`, x, y, anchor)...)
	s.b = appendXMLEscaped(s.b, xmlSafe(content))
	s.b = append(s.b, "</text>\n"...)
	s.flush()
}

// svgMetaLines is the header: what was recorded, and what went missing
// (warn: something did).
func svgMetaLines(m Meta, lay *svgLayout) (string, string, bool) {
	var a []string
	if m.Mode != "" {
		a = append(a, "mode "+m.Mode)
	}
	if m.Pid != 0 {
		a = append(a, fmt.Sprintf("pid %d", m.Pid))
	}
	if m.Python != "" {
		a = append(a, "Python "+m.Python)
	}
	a = append(a, group(int64(m.Samples))+" samples")
	a = append(a, fmt.Sprintf("%.2f s", m.DurationS))
	if m.RequestedHz > 0 || m.AchievedHz > 0 {
		a = append(a, fmt.Sprintf("%s Hz requested, %s Hz achieved", fmtHz(m.RequestedHz), fmtHz(m.AchievedHz)))
	}
	if m.Unit == "microseconds" {
		a = append(a, fmt.Sprintf("%.3f s off-CPU in total", float64(lay.total)/1e6))
	}
	pctOf := func(n uint64) string {
		if m.Samples == 0 || n == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f%%)", 100*float64(n)/float64(m.Samples))
	}
	b := []string{
		"lost " + group(int64(m.Lost)) + pctOf(m.Lost),
		"torn " + group(int64(m.Torn)) + pctOf(m.Torn),
		"failed " + group(int64(m.Failed)) + pctOf(m.Failed),
		"throttled " + group(int64(m.Throttled)),
	}
	if m.ReadLagUS > 0 || m.Late > 0 { // cpu mode: as the record footer says it
		b = append(b, "late "+group(int64(m.Late))+pctOf(m.Late)+fmt.Sprintf(" (mean read lag %.0f µs)", m.ReadLagUS), "moved "+group(int64(m.Moved)))
	}
	b = append(b,
		fmt.Sprintf("observer CPU %.3f s", m.ObserverCPUS),
		fmt.Sprintf("pyobs stopped the target %.3f s", m.TargetStoppedS),
	)
	if lay.omitted > 0 {
		b = append(b, fmt.Sprintf("%s frames under %.1f px not drawn", group(int64(lay.omitted)), svgMinPx))
	}
	warn := m.Lost+m.Torn+m.Failed+m.Throttled > 0
	return strings.Join(a, " · "), strings.Join(b, " · "), warn
}

func fmtHz(hz float64) string { return strconv.FormatFloat(hz, 'f', 1, 64) }

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// svgClass is a frame's colour class: its kind's letter and a shade picked
// by hashing the function name (so one function has one colour).
func svgClass(k svgKey) string {
	h := fnv.New32a()
	h.Write([]byte(k.function))
	shade := byte('0' + h.Sum32()%svgShades)
	switch k.kind {
	case Python:
		return string([]byte{'p', shade})
	case Native:
		return string([]byte{'n', shade})
	case Kernel:
		return string([]byte{'k', shade})
	case Thread:
		return string([]byte{'t', shade})
	}
	return string([]byte{'s', shade})
}

// svgCSS styles the picture: per kind a palette of shades, HSL ranges
// chosen so kinds stay apart (Python warm red..yellow, native blue,
// kernel green, thread purple, state grey).
func svgCSS() string {
	var b strings.Builder
	b.WriteString(`text{font-family:monospace;font-size:12px;fill:#000}
.bg{fill:#f8f8f4}
.title{font-size:17px;font-weight:bold}
.meta{fill:#333}
.warn{fill:#b00000}
.btn{fill:#0645ad;cursor:pointer;text-decoration:underline}
.hide{display:none}
.frame{cursor:pointer}
.frame text{pointer-events:none}
.frame:hover>rect{stroke:#000;stroke-width:.6}
.r>rect{fill:#c8c8c8}
`)
	palettes := []struct {
		letter        byte
		h0, dh, s, l0 float64
	}{
		{'p', 0, 7, .85, .60},
		{'n', 195, 5, .55, .66},
		{'k', 85, 7, .45, .55},
		{'t', 265, 5, .30, .70},
		{'s', 0, 0, 0, .62},
	}
	for _, pl := range palettes {
		for i := range svgShades {
			l := pl.l0 + float64(i%3)*0.03
			fmt.Fprintf(&b, ".%c%d>rect{fill:%s}\n", pl.letter, i, hslHex(pl.h0+pl.dh*float64(i), pl.s, l))
		}
	}
	b.WriteString(".frame.match>rect{fill:#e040fb}\n")
	return b.String()
}

// hslHex converts HSL (h in degrees, s and l in 0..1) to #rrggbb.
func hslHex(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	hp := math.Mod(h, 360) / 60
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, bl float64
	switch {
	case hp < 1:
		r, g = c, x
	case hp < 2:
		r, g = x, c
	case hp < 3:
		g, bl = c, x
	case hp < 4:
		g, bl = x, c
	case hp < 5:
		r, bl = x, c
	default:
		r, bl = c, x
	}
	mm := l - c/2
	to := func(v float64) int { return int(math.Round((v + mm) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", to(r), to(g), to(bl))
}

// svgRuneW is a rune's width in monospace cells (CJK and the like: 2).
// svg.js has the same rule.
func svgRuneW(r rune) int {
	if r >= 0x2e80 && r <= 0xffdc {
		return 2
	}
	return 1
}

// svgFit cuts label to what fits in px (svg.js's fit does the same).
func svgFit(label string, px float64) string {
	m := int(math.Floor((px - 6) / svgCharW))
	if m < 3 {
		return ""
	}
	n := 0
	for _, r := range label {
		n += svgRuneW(r)
	}
	if n <= m {
		return label
	}
	n = 0
	for i, r := range label {
		if n+svgRuneW(r) > m-2 {
			return label[:i] + ".."
		}
		n += svgRuneW(r)
	}
	return label
}

// xmlSafe replaces what XML 1.0 cannot hold (invalid UTF-8, control
// characters other than tab, U+FFFE, U+FFFF) with U+FFFD, and tabs and
// line breaks with spaces.
func xmlSafe(s string) string {
	ok := true
	for _, r := range s {
		if r < 0x20 || r == utf8.RuneError || r == 0xfffe || r == 0xffff {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || r == 0xfffe || r == 0xffff:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r) // invalid UTF-8 arrives here as RuneError
		}
	}
	return b.String()
}

// appendXMLEscaped escapes s (already xmlSafe) for text or a "-quoted
// attribute.
func appendXMLEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b = append(b, "&amp;"...)
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '"':
			b = append(b, "&quot;"...)
		default:
			b = append(b, c)
		}
	}
	return b
}
