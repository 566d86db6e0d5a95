package flame

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// GeckoVersion is the Gecko profile format version WriteGecko writes: the
// first with the frame table schema below (v27 dropped "optimizations").
// profiler.firefox.com upgrades it to the current version on import.
const GeckoVersion = 27

// GeckoMaxSamples bounds the sample rows WriteGecko writes (see WriteGecko).
const GeckoMaxSamples = 1 << 20

// Categories of the frames, in meta.categories order.
const (
	geckoOther = iota
	geckoPython
	geckoNative
	geckoKernel
	geckoState
)

// WriteGecko writes p in the Gecko profile format (the JSON Firefox writes
// and profiler.firefox.com imports): meta, one thread per Thread frame (or
// one), each with its stringTable, frameTable, stackTable and samples.
//
// The format has no sample weights: a sample is a row. p is aggregated,
// so each unique stack becomes round(weight/q) rows (at least one), where
// one row stands for q samples (or q µs off-CPU) and q is 1 unless the
// profile has more than GeckoMaxSamples of them; meta.interval is q sample
// periods (or q µs) in ms. Sample times are therefore synthetic (rows in
// stack order, one interval apart); meta.misc says so, with the
// recording's account of itself.
//
// Python frames are "QUALNAME (FILE:LINE)" (imported as JS-like functions
// with a file), native ones "SYMBOL (in LIB)", kernel ones
// "SYMBOL (in [kernel.kallsyms])"; each kind has its own category.
func WriteGecko(w io.Writer, p *Profile) error {
	m := p.Meta
	var periodMS float64 // what one unit of weight stands for, in ms
	switch m.Unit {
	case "samples", "":
		periodMS = 1
		if ns := pprofPeriodNS(m); ns > 0 {
			periodMS = float64(ns) / 1e6
		}
	case "microseconds":
		periodMS = 0.001
	default:
		return fmt.Errorf("can't write gecko: unknown unit %q (want samples or microseconds)", m.Unit)
	}
	total := p.Total()
	q := int64(1)
	if total > GeckoMaxSamples {
		q = (total + GeckoMaxSamples - 1) / GeckoMaxSamples
	}
	interval := periodMS * float64(q)
	name := profileName(m)
	groups := splitThreads(p, name)

	gw := &geckoWriter{w: bufio.NewWriterSize(w, 64<<10)}
	gw.s(`{"meta":{"version":`)
	gw.int(GeckoVersion)
	gw.s(`,"interval":`)
	gw.float(interval)
	gw.s(`,"startTime":0,"shutdownTime":null,"processType":0,"product":"pyobs","stackwalk":0,"debug":0,"gcpoison":0,"asyncstack":0,"presymbolicated":true,"misc":`)
	rowUnit := "samples"
	if m.Unit == "microseconds" {
		rowUnit = "microseconds"
	}
	gw.str(fmt.Sprintf("%s; %s; aggregated: sample order and times are synthetic, one sample = %d %s",
		name, metaSummary(m), q, rowUnit))
	gw.s(`,"categories":[` +
		`{"name":"Other","color":"grey","subcategories":["Other"]},` +
		`{"name":"Python","color":"yellow","subcategories":["Other"]},` +
		`{"name":"Native","color":"blue","subcategories":["Other"]},` +
		`{"name":"Kernel","color":"orange","subcategories":["Other"]},` +
		`{"name":"Thread state","color":"purple","subcategories":["Other"]}],` +
		`"markerSchema":[]},"libs":[],"pausedRanges":[],"processes":[],"threads":[`)
	for ti, g := range groups {
		if ti > 0 {
			gw.s(",")
		}
		gw.thread(p, g, ti+1, q, interval)
	}
	gw.s("]}\n")
	if gw.err == nil {
		gw.err = gw.w.Flush()
	}
	if gw.err != nil {
		return fmt.Errorf("can't write gecko: %w", gw.err)
	}
	return nil
}

type geckoWriter struct {
	w   *bufio.Writer
	err error
	buf []byte
}

func (g *geckoWriter) s(s string) {
	if g.err == nil {
		_, g.err = g.w.WriteString(s)
	}
}

func (g *geckoWriter) flush() {
	if g.err == nil {
		_, g.err = g.w.Write(g.buf)
	}
	g.buf = g.buf[:0]
}

func (g *geckoWriter) int(n int64) { g.buf = strconv.AppendInt(g.buf, n, 10); g.flush() }

func (g *geckoWriter) float(f float64) { g.buf = strconv.AppendFloat(g.buf, f, 'f', -1, 64); g.flush() }

func (g *geckoWriter) str(s string) { g.buf = appendJSONString(g.buf, s); g.flush() }

func (g *geckoWriter) thread(p *Profile, tg *threadGroup, tid int, q int64, interval float64) {
	strs := map[string]int{}
	var strTable []string
	intern := func(s string) int {
		if i, ok := strs[s]; ok {
			return i
		}
		strs[s] = len(strTable)
		strTable = append(strTable, s)
		return len(strTable) - 1
	}
	type frameRow struct {
		loc, line, cat int // line -1: null
	}
	frameIdx := map[frameRow]int{}
	var frames []frameRow
	perFrame := make([]int32, p.NumFrames()) // profile frame index → frame row + 1
	frame := func(id int) int32 {
		if i := perFrame[id]; i > 0 {
			return i - 1
		}
		f := p.Frame(id)
		row := frameRow{line: -1}
		switch f.Kind {
		case Python:
			row.loc, row.line, row.cat = intern(f.Label()), f.Line, geckoPython
		case Native:
			fn := f.Function
			if fn == "" {
				fn = "[unknown]"
			}
			if f.File != "" {
				fn += " (in " + filepath.Base(f.File) + ")"
			}
			row.loc, row.cat = intern(fn), geckoNative
		case Kernel:
			fn := f.Function
			if fn == "" {
				fn = "[unknown]"
			}
			row.loc, row.cat = intern(fn+" (in [kernel.kallsyms])"), geckoKernel
		case State:
			row.loc, row.cat = intern(f.Function), geckoState
		default:
			row.loc, row.cat = intern(f.Label()), geckoOther
		}
		i, ok := frameIdx[row]
		if !ok {
			i = len(frames)
			frameIdx[row] = i
			frames = append(frames, row)
		}
		perFrame[id] = int32(i) + 1
		return int32(i)
	}
	// The stack table is the trie of the stacks' frame rows: a node per
	// distinct (prefix node, frame row), keyed compactly (it can have a
	// node per frame of every stack).
	type stackRow struct{ prefix, frame int32 } // prefix -1: null
	stackIdx := map[uint64]int32{}
	var stacks []stackRow
	leaf := make([]int32, len(tg.stacks)) // stack row of each stack's leaf, -1 for none
	for si, s := range tg.stacks {
		prefix := int32(-1)
		for _, id := range s.frames {
			fr := frame(id)
			key := uint64(uint32(prefix))<<32 | uint64(uint32(fr))
			i, ok := stackIdx[key]
			if !ok {
				i = int32(len(stacks))
				stackIdx[key] = i
				stacks = append(stacks, stackRow{prefix, fr})
			}
			prefix = i
		}
		leaf[si] = prefix
	}

	g.s(`{"name":`)
	g.str(tg.name)
	g.s(`,"processType":"default","processName":`)
	g.str(profileName(p.Meta))
	g.s(`,"registerTime":0,"unregisterTime":null,"tid":`)
	g.int(int64(tid))
	g.s(`,"pid":`)
	g.int(int64(p.Meta.Pid))
	g.s(`,"markers":{"schema":{"name":0,"startTime":1,"endTime":2,"phase":3,"category":4,"data":5},"data":[]}`)
	g.s(`,"samples":{"schema":{"stack":0,"time":1,"eventDelay":2},"data":[`)
	n := int64(0)
	for si, s := range tg.stacks {
		if s.weight <= 0 {
			continue
		}
		rows := (s.weight + q/2) / q
		if rows < 1 {
			rows = 1
		}
		for ; rows > 0; rows-- {
			if n > 0 {
				g.buf = append(g.buf, ',')
			}
			g.buf = append(g.buf, '[')
			if leaf[si] < 0 {
				g.buf = append(g.buf, "null"...)
			} else {
				g.buf = strconv.AppendInt(g.buf, int64(leaf[si]), 10)
			}
			g.buf = append(g.buf, ',')
			g.buf = strconv.AppendFloat(g.buf, roundMS(float64(n)*interval), 'f', -1, 64)
			g.buf = append(g.buf, ",0]"...)
			n++
			if len(g.buf) > 32<<10 {
				g.flush()
			}
		}
	}
	g.flush()
	g.s(`]},"frameTable":{"schema":{"location":0,"relevantForJS":1,"innerWindowID":2,"implementation":3,"line":4,"column":5,"category":6,"subcategory":7},"data":[`)
	for i, f := range frames {
		if i > 0 {
			g.buf = append(g.buf, ',')
		}
		g.buf = append(g.buf, '[')
		g.buf = strconv.AppendInt(g.buf, int64(f.loc), 10)
		g.buf = append(g.buf, ",false,null,null,"...)
		if f.line < 0 {
			g.buf = append(g.buf, "null"...)
		} else {
			g.buf = strconv.AppendInt(g.buf, int64(f.line), 10)
		}
		g.buf = append(g.buf, ",null,"...)
		g.buf = strconv.AppendInt(g.buf, int64(f.cat), 10)
		g.buf = append(g.buf, ",0]"...)
	}
	g.flush()
	g.s(`]},"stackTable":{"schema":{"prefix":0,"frame":1},"data":[`)
	for i, s := range stacks {
		if i > 0 {
			g.buf = append(g.buf, ',')
		}
		g.buf = append(g.buf, '[')
		if s.prefix < 0 {
			g.buf = append(g.buf, "null"...)
		} else {
			g.buf = strconv.AppendInt(g.buf, int64(s.prefix), 10)
		}
		g.buf = append(g.buf, ',')
		g.buf = strconv.AppendInt(g.buf, int64(s.frame), 10)
		g.buf = append(g.buf, ']')
		if len(g.buf) > 32<<10 {
			g.flush()
		}
	}
	g.flush()
	g.s(`]},"stringTable":[`)
	for i, s := range strTable {
		if i > 0 {
			g.buf = append(g.buf, ',')
		}
		g.buf = appendJSONString(g.buf, s)
	}
	g.flush()
	g.s("]}")
}

// roundMS rounds a time in ms to the nanosecond, so that synthetic times
// print without float noise.
func roundMS(t float64) float64 { return math.Round(t*1e6) / 1e6 }

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
