package top

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Sort keys of the view.
const (
	ByOwn   = 'o'
	ByTotal = 't'
	ByName  = 'n'
	// PerThread is the key that splits the rows by thread (and joins them).
	PerThread = 'h'
)

// SortFunctions orders fs by key (ByOwn, ByTotal, ByName); ties fall back
// to the other counts, then the name, so the order is stable between frames.
func SortFunctions(fs []Function, key byte) {
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		switch key {
		case ByTotal:
			if a.Total != b.Total {
				return a.Total > b.Total
			}
			if a.Own != b.Own {
				return a.Own > b.Own
			}
		case ByName:
		default:
			if a.Own != b.Own {
				return a.Own > b.Own
			}
			if a.Total != b.Total {
				return a.Total > b.Total
			}
		}
		if a.Function != b.Function {
			return a.Function < b.Function
		}
		return a.File < b.File
	})
}

func sortThreads(ts []Thread) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Samples != ts[j].Samples {
			return ts[i].Samples > ts[j].Samples
		}
		return ts[i].Thread < ts[j].Thread
	})
}

// View is what the person at the terminal chose.
type View struct {
	Sort      byte // ByOwn, ByTotal, ByName
	Paused    bool
	PerThread bool // rows under each thread (by its share), not over all threads
}

// Screen renders sn as at most height lines of at most width columns
// (cells, one per rune): a header, the threads, the keys, then the
// functions in v's order. The caller clears the rest of each line.
func Screen(sn *Snapshot, v View, width, height int) []string {
	if width < 20 {
		width = 20
	}
	var out []string
	add := func(s string) {
		if len(out) < height {
			out = append(out, fit(s, width))
		}
	}
	state := ""
	if v.Paused {
		state = "PAUSED · " // first: seen on the narrowest terminal
	}
	engine := sn.Mode
	if sn.Engine != "" {
		engine += ", " + sn.Engine
	}
	add(fmt.Sprintf("%spyobs top · pid %d · %s · %.0f samples/s (-F %d) · observer CPU %.1f%% · target CPU %.1f%%",
		state, sn.Pid, engine, sn.SamplesPerS, sn.Freq, 100*sn.ObserverCPU, 100*sn.TargetCPU))
	acct := fmt.Sprintf("%.0f s · %d samples · lost %d · torn %d · late %d", sn.ElapsedS, sn.SamplesAll, sn.Lost, sn.Torn, sn.Late)
	if sn.Fallback != "" {
		acct += " · " + sn.Fallback
	}
	add(acct)
	if sn.StoppedS > 0 {
		add(fmt.Sprintf("STOPPED by a signal or a tracer for %.1f s of this %.1f s interval (%.1f s since the start): a stopped target runs nothing and is not sampled",
			sn.StoppedS, sn.IntervalS, sn.StoppedAll))
	}
	var th []string
	for _, t := range sn.Threads {
		th = append(th, fmt.Sprintf("%s %.0f%%", t.Thread, t.Pct))
	}
	if len(th) == 0 {
		th = []string{"no samples in this interval"}
	}
	add("threads: " + strings.Join(th, " · "))
	names := map[byte]string{ByOwn: "own", ByTotal: "total", ByName: "name"}
	sortName := names[v.Sort]
	if sortName == "" {
		sortName = "own"
	}
	split := ""
	if v.PerThread {
		split = ", per thread"
	}
	add("keys: o own · t total · n name · h per thread · p pause · q quit · sorted by " + sortName + split)
	add("")
	add(fmt.Sprintf("%6s %7s %9s %9s  %s", "%Own", "%Total", "Own(s)", "Total(s)", "Function (file)"))
	hz := float64(sn.Freq)
	if hz <= 0 {
		hz = 1
	}
	rows := func(fs []Function) {
		fs = append([]Function(nil), fs...)
		SortFunctions(fs, v.Sort)
		for _, f := range fs {
			name := f.Function
			if f.File != "" {
				name += " (" + f.File + ")"
			}
			add(fmt.Sprintf("%5.1f%% %6.1f%% %9.2f %9.2f  %s", f.OwnPct, f.TotalPct, float64(f.OwnAll)/hz, float64(f.TotalAll)/hz, name))
		}
	}
	if !v.PerThread {
		rows(sn.Functions)
		return out
	}
	for _, t := range sn.Threads {
		add(fmt.Sprintf("── %s: %.1f%% of the samples", t.Thread, t.Pct))
		rows(t.Functions)
	}
	return out
}

// fit cuts s to w cells (CJK and the like take two; control characters
// become '?', so a hostile function name cannot move the cursor).
func fit(s string, w int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		cw := 1
		if r >= 0x2e80 && r <= 0xffdc {
			cw = 2
		}
		if n+cw > w {
			break
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			r = '?'
		}
		b.WriteRune(r)
		n += cw
	}
	return b.String()
}
