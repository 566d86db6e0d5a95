package flame

import (
	"fmt"
	"io"
	"math"

	"github.com/google/pprof/profile"
)

// WritePprof writes p as a gzipped pprof profile (go tool pprof reads it).
//
// Sample types: for Meta.Unit "samples", samples/count and
// <mode>/nanoseconds (count × the sample period; "wall" or "gil" in those
// modes, else "cpu"), with PeriodType <mode>/nanoseconds; the time type is left out
// when the period is unknown (no PeriodNS and no RequestedHz) rather than
// made up. For "microseconds" (off-CPU), samples/count and
// offcpu/microseconds.
//
// Python frames become Function{Name: qualname, Filename: file} with the
// executing line in Line; native and kernel frames keep their address and,
// when File is set, a Mapping for that file; kernel functions are named
// "SYMBOL_[k]" as in the folded format. Every name is written as the other
// formats show it, in Name alone (no SystemName), so go tool pprof shows
// it unchanged. Thread and State frames are not
// locations: they become the sample labels "thread" and "state" — and a
// set's process root ("[pid N] argv", IsProcessRoot) the label "process".
// Meta goes into the profile's comments.
func WritePprof(w io.Writer, p *Profile) error {
	pp, err := toPprof(p)
	if err != nil {
		return err
	}
	if err := pp.CheckValid(); err != nil {
		return fmt.Errorf("can't write pprof: invalid profile: %w", err)
	}
	if err := pp.Write(w); err != nil {
		return fmt.Errorf("can't write pprof: %w", err)
	}
	return nil
}

// pprofPeriodNS is the time one sample stands for, 0 when unknown.
func pprofPeriodNS(m Meta) int64 {
	if m.PeriodNS > 0 {
		return m.PeriodNS
	}
	if m.RequestedHz > 0 {
		return int64(math.Round(1e9 / m.RequestedHz))
	}
	return 0
}

func toPprof(p *Profile) (*profile.Profile, error) {
	m := p.Meta
	pp := &profile.Profile{
		Comments:      []string{profileName(m), metaSummary(m)},
		DurationNanos: int64(m.DurationS * 1e9),
	}
	period := int64(0)
	switch m.Unit {
	case "samples", "":
		timeType := "cpu"
		if m.Mode == "wall" || m.Mode == "gil" {
			timeType = m.Mode // gil: time holding the GIL, CPU or not
		}
		pp.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}}
		pp.DefaultSampleType = "samples"
		if period = pprofPeriodNS(m); period > 0 {
			pp.SampleType = append(pp.SampleType, &profile.ValueType{Type: timeType, Unit: "nanoseconds"})
			pp.PeriodType = &profile.ValueType{Type: timeType, Unit: "nanoseconds"}
			pp.Period = period
			pp.DefaultSampleType = timeType
		}
	case "microseconds":
		pp.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "offcpu", Unit: "microseconds"}}
		pp.DefaultSampleType = "offcpu"
	case "bytes": // mem: the growth of allocation sites
		pp.SampleType = []*profile.ValueType{{Type: "sites", Unit: "count"}, {Type: "space", Unit: "bytes"}}
		pp.DefaultSampleType = "space"
	default:
		return nil, fmt.Errorf("can't write pprof: unknown unit %q (want samples or microseconds)", m.Unit)
	}

	type funcKey struct {
		name, file string
	}
	type locKey struct {
		fn   *profile.Function
		line int
		addr uint64
		m    *profile.Mapping
	}
	funcs := map[funcKey]*profile.Function{}
	locs := map[locKey]*profile.Location{}
	maps := map[string]*profile.Mapping{}
	// Per frame index: its location (nil for Thread/State frames).
	frameLoc := make([]*profile.Location, p.NumFrames())
	location := func(id int) *profile.Location {
		if l := frameLoc[id]; l != nil {
			return l
		}
		f := p.Frame(id)
		name := f.Function
		switch f.Kind {
		case Kernel:
			name = f.Label()
		case Native:
			if name == "" {
				name = "[unknown]"
			}
		}
		fk := funcKey{name, f.File}
		fn := funcs[fk]
		if fn == nil {
			// No SystemName: when Name equals it, pprof's symbolizer takes
			// the name for a C++ symbol and cuts what is between <> and ()
			// ("<module>" and "<lambda>" became empty, "[unknown]
			// (lib+0xoff)" lost its place). Our names are final (native
			// ones already demangled by internal/unwind).
			fn = &profile.Function{ID: uint64(len(pp.Function) + 1), Name: name, Filename: f.File}
			funcs[fk] = fn
			pp.Function = append(pp.Function, fn)
		}
		var mp *profile.Mapping
		if f.Kind != Python && f.File != "" {
			mp = maps[f.File]
			if mp == nil {
				mp = &profile.Mapping{ID: uint64(len(pp.Mapping) + 1), File: f.File, HasFunctions: true}
				maps[f.File] = mp
				pp.Mapping = append(pp.Mapping, mp)
			}
		}
		lk := locKey{fn, f.Line, f.Addr, mp}
		if f.Kind == Python {
			lk.addr = 0
		}
		l := locs[lk]
		if l == nil {
			l = &profile.Location{ID: uint64(len(pp.Location) + 1), Mapping: mp, Address: lk.addr,
				Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
			locs[lk] = l
			pp.Location = append(pp.Location, l)
		}
		frameLoc[id] = l
		return l
	}

	for _, s := range sortedStacks(p) {
		sm := &profile.Sample{}
		for i := len(s.Frames) - 1; i >= 0; i-- { // pprof wants the leaf first
			id := s.Frames[i]
			switch f := p.Frame(id); f.Kind {
			case Thread:
				if IsProcessRoot(f) {
					addLabel(sm, "process", f.Function)
				} else {
					addLabel(sm, "thread", f.Function)
				}
			case State:
				addLabel(sm, "state", f.Function)
			default:
				sm.Location = append(sm.Location, location(id))
			}
		}
		switch {
		case m.Unit == "microseconds" || m.Unit == "bytes":
			sm.Value = []int64{s.Count, s.Weight}
		case period > 0:
			sm.Value = []int64{s.Weight, s.Weight * period}
		default:
			sm.Value = []int64{s.Weight}
		}
		pp.Sample = append(pp.Sample, sm)
	}
	// Labels were added leaf first; put them root first (outermost thread first).
	for _, sm := range pp.Sample {
		for _, v := range sm.Label {
			for i, j := 0, len(v)-1; i < j; i, j = i+1, j-1 {
				v[i], v[j] = v[j], v[i]
			}
		}
	}
	return pp, nil
}

func addLabel(s *profile.Sample, key, value string) {
	if s.Label == nil {
		s.Label = map[string][]string{}
	}
	s.Label[key] = append(s.Label[key], value)
}
