package mem

import (
	"fmt"
	"io"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
)

// Profile is the window's growth as a profile: one stack per grown site
// (root first), weighted by the bytes it grew.
func Profile(r *Result) *flame.Profile {
	p := flame.New(flame.Meta{Command: "mem", Mode: "growth", Unit: "bytes", Pid: r.Pid, Python: r.Python,
		DurationS: r.WindowS, Samples: uint64(len(r.allGrowth)), Engine: r.Engine})
	for _, g := range r.allGrowth {
		fr := make([]flame.Frame, len(g.Stack))
		for i, f := range g.Stack {
			switch f.Kind {
			case KindNative:
				fr[len(g.Stack)-1-i] = flame.Frame{Kind: flame.Native, Function: f.Function, File: f.File}
			case KindMarker:
				fr[len(g.Stack)-1-i] = flame.Frame{Kind: flame.State, Function: f.Function}
			default:
				fr[len(g.Stack)-1-i] = flame.Frame{Kind: flame.Python, Function: f.Function, File: f.File, Line: f.Line}
			}
		}
		if len(fr) == 0 || g.Bytes <= 0 {
			continue
		}
		p.Add(fr, g.Bytes)
	}
	return p
}

// Bytes renders a byte count for people (binary units).
func Bytes(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%s%.2f GiB", sign, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%s%.2f MiB", sign, float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%s%.1f KiB", sign, float64(n)/(1<<10))
	}
	return fmt.Sprintf("%s%d B", sign, n)
}

// WriteText is the report for people.
func WriteText(w io.Writer, r *Result) error {
	if r.Probe != nil {
		fmt.Fprintf(w, "pid %d, Python %s, engine %s: a window of %.2f s (uprobes on %s in %s; one allocation kept per %s on average)\n",
			r.Pid, r.Python, r.Engine, r.WindowS, strings.Join(r.Probe.Probed, ", "), r.Probe.Binary, Bytes(int64(r.Probe.SampleBytes)))
		if r.Probe.Inlined {
			fmt.Fprintln(w, "this build inlines its allocator into its callers (link-time optimised): calls and small blocks' frees made inside it reach no probe (large blocks' frees are seen at libc's free); small sites' growth may include freed blocks")
		}
		if len(r.Probe.Missing) > 0 {
			fmt.Fprintf(w, "not in the ELF, their calls unseen: %s\n", strings.Join(r.Probe.Missing, ", "))
		}
	} else {
		fmt.Fprintf(w, "pid %d, Python %s, engine %s: a window of %.2f s (tracemalloc, %d frames; it was %s before and is %s now)\n",
			r.Pid, r.Python, r.Engine, r.WindowS, r.Frames, onOff(r.TracemallocWasOn), onOff(r.TracemallocOnNow))
	}
	if r.EngineReason != "" {
		fmt.Fprintln(w, r.EngineReason)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted: the window ended early")
	}
	if r.Execed != "" {
		fmt.Fprintf(w, "the target exec'd (now %s): the window ended at the exec (seen within 20 ms); the memory is the old program's last reading\n", r.Execed)
	}
	for _, m := range r.ProbesMoved {
		fmt.Fprintf(w, "thread %d, which the probes were open on, ended: opened again on thread %d %.2f s into the window (up to %.3f s without probes: calls then not counted)\n",
			m.From, m.To, m.AtS, m.GapS)
	}
	if r.ProbesEnded != "" {
		fmt.Fprintln(w, r.ProbesEnded)
	}
	if r.Memory.Error != "" {
		fmt.Fprintf(w, "memory: %s\n", r.Memory.Error)
	} else {
		fmt.Fprintf(w, "memory: RSS %s -> %s (%s), PSS %s -> %s (%s)\n",
			Bytes(int64(r.Memory.RSSStart)), Bytes(int64(r.Memory.RSSEnd)), signed(r.Memory.RSSDeltaS),
			Bytes(int64(r.Memory.PSSStart)), Bytes(int64(r.Memory.PSSEnd)), signed(r.Memory.PSSDeltaS))
	}
	traced := "traced"
	if r.Probe != nil {
		traced = "tracked (estimated, allocated in the window)"
	}
	fmt.Fprintf(w, "%s: %s live at the end (peak %s); grown in the window and alive at its end: %s over %d sites\n",
		traced, Bytes(r.TracedBytesEnd), Bytes(r.TracedPeakBytes), Bytes(r.GrowthTotalBytes), len(r.allGrowth))
	if u := unseenGrowth(r); u != "" {
		fmt.Fprintln(w, u)
	}
	fmt.Fprintln(w)
	writeCurve(w, r.Curve)
	fmt.Fprintln(w, "growth (allocated in the window, still alive at its end):")
	if len(r.Growth) == 0 {
		fmt.Fprintln(w, "  none above the threshold")
	}
	for _, g := range r.Growth {
		fmt.Fprintf(w, "  %12s %10s/s %+8d  %s (%s:%d)\n", signed(g.Bytes), Bytes(int64(g.BytesPerS)), g.Count, g.Function, g.File, g.Line)
		// The native frames under the site (--native), from it to the leaf.
		site := 0
		for site < len(g.Stack) && g.Stack[site].Kind != "" {
			site++
		}
		if site > 0 {
			var into []string
			for i := min(site, len(g.Stack)) - 1; i >= 0; i-- {
				into = append(into, g.Stack[i].Function)
			}
			fmt.Fprintf(w, "  %12s %12s %8s    into %s\n", "", "", "", strings.Join(into, " → "))
		}
		if site >= len(g.Stack) {
			continue
		}
		for _, f := range g.Stack[site+1 : min(len(g.Stack), site+4)] {
			if f.Kind != "" {
				fmt.Fprintf(w, "  %12s %12s %8s    called from %s\n", "", "", "", f.Function)
				continue
			}
			fmt.Fprintf(w, "  %12s %12s %8s    called from %s (%s:%d)\n", "", "", "", f.Function, f.File, f.Line)
		}
	}
	if r.GrowthOther.Sites > 0 {
		fmt.Fprintf(w, "  %12s in %d smaller sites\n", signed(r.GrowthOther.Bytes), r.GrowthOther.Sites)
	}
	fmt.Fprintln(w, "\nlargest at the end (by size):")
	for _, g := range r.BySize[:min(len(r.BySize), 10)] {
		fmt.Fprintf(w, "  %12s %9d  %s (%s:%d)\n", Bytes(g.Bytes), g.Count, g.Function, g.File, g.Line)
	}
	fmt.Fprintln(w, "\nmost blocks at the end (by count):")
	for _, g := range r.ByCount[:min(len(r.ByCount), 10)] {
		fmt.Fprintf(w, "  %12s %9d  %s (%s:%d)\n", Bytes(g.Bytes), g.Count, g.Function, g.File, g.Line)
	}
	if p := r.Probe; p != nil {
		fmt.Fprintf(w, "\ncost: %d allocator calls (two traps each) and %d frees (one) in the window; %d kept (a stack walk each), %d of them freed, %d live at the end\n",
			p.Calls, p.Frees, p.Tracked, p.Freed, p.LiveEnd)
		switch {
		case p.Calls == 0 && r.Stopped != "":
			fmt.Fprintln(w, "no allocator call reached the probes in the window: "+r.Stopped)
		case p.Calls == 0:
			fmt.Fprintln(w, "no allocator call reached the probes in the window: the build inlined them, or the target routes its allocator elsewhere (PYTHONMALLOC)")
		case r.Stopped != "":
			fmt.Fprintln(w, r.Stopped)
		}
		if p.Missed > 0 {
			fmt.Fprintf(w, "missed: the kernel skipped the probes' programs %d times (another BPF program was running on that CPU): those calls are not seen\n", p.Missed)
		}
		if p.DroppedLive > 0 || p.Stacks.Lost > 0 || p.DroppedPend > 0 {
			fmt.Fprintf(w, "not kept: %d allocations (%s) found the live map full, %d calls the pending map full; %d stacks lost in the ring\n",
				p.DroppedLive, Bytes(int64(p.DroppedEst)), p.DroppedPend, p.Stacks.Lost)
		}
		if n := p.Native; n != nil {
			fmt.Fprintf(w, "native: %d stacks copied (%s each on average, at most %s), %d lost; unwound %d to the end, %d truncated, %d failed; %d merged, %d mismatched\n",
				n.Copies, Bytes(int64(n.MeanBytes)), Bytes(int64(n.StackBytes)), n.Lost, n.Full, n.Truncated, n.Failed, n.Merged, n.Mismatch)
		}
		_, err := fmt.Fprintf(w, "stacks: %d walked whole, %d truncated, %d faulted, %d torn, %d without a thread state, %d distinct\n",
			p.Stacks.Walked, p.Stacks.Truncated, p.Stacks.Fault, p.Stacks.Invalid, p.Stacks.NoPython, p.Stacks.Distinct)
		return err
	}
	_, err := fmt.Fprintf(w, "\ncost: the target ran pyobs's scripts for %.1f ms + %.1f ms (GIL held); tracemalloc traced every allocation for the window\n",
		r.Cost.StartPauseS*1e3, r.Cost.EndPauseS*1e3)
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func signed(n int64) string {
	if n >= 0 {
		return "+" + Bytes(n)
	}
	return Bytes(n)
}

// writeCurve prints up to eight points of the traced-bytes curve, each with
// the RSS read nearest in time.
func writeCurve(w io.Writer, c []CurvePoint) {
	var traced []CurvePoint
	for _, p := range c {
		if p.TracedBytes != nil {
			traced = append(traced, p)
		}
	}
	if len(traced) == 0 {
		return
	}
	fmt.Fprint(w, "curve (s: traced / RSS):")
	n := min(len(traced), 8)
	for i := 0; i < n; i++ {
		p := traced[i*(len(traced)-1)/max(n-1, 1)]
		rss, best := "?", 0.0
		for _, q := range c {
			if d := q.TS - p.TS; q.RSSBytes != nil && (rss == "?" || d*d < best) {
				rss, best = Bytes(int64(*q.RSSBytes)), d*d
			}
		}
		fmt.Fprintf(w, "  %.1f: %s / %s", p.TS, Bytes(*p.TracedBytes), rss)
	}
	fmt.Fprint(w, "\n\n")
}

// unseenGrowth says when the probes saw under half of what RSS grew (by
// a MiB or more): the rest was allocated where no probe fires — a build
// that inlines its allocator, malloc, PyMem_Raw* — and the sites, the
// probes' view, may not hold the largest grower at all.
func unseenGrowth(r *Result) string {
	if r.Probe == nil || r.Memory.Error != "" {
		return ""
	}
	rss := r.Memory.RSSDeltaS
	if rss < 1<<20 || 2*r.GrowthTotalBytes >= rss {
		return ""
	}
	return fmt.Sprintf("not seen: RSS grew %s while the probes saw %s of growth (%.0f %%): the rest was allocated where no probe fires (inlined allocator calls, malloc, PyMem_Raw*), so the largest grower may be missing from the sites below",
		Bytes(rss), Bytes(r.GrowthTotalBytes), 100*float64(r.GrowthTotalBytes)/float64(rss))
}
