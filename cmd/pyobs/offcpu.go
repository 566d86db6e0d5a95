package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
)

type offcpuFlags struct {
	duration time.Duration
	minBlock time.Duration
	wall     bool
	threads  bool
	icicle   bool
}

var offcpuFormats = []string{"text", "svg", "folded", "pprof", "speedscope", "gecko", "json"}

func newOffcpu(g *globals) *cobra.Command {
	var f offcpuFlags
	c := &cobra.Command{
		Use:   "offcpu (-p PID | -- CMD ARGS)",
		Short: "Where threads wait: blocked time (µs) by Python stack, with the reason (tracing context switches)",
		Long: `offcpu measures every off-CPU interval of every thread of the target and
weights the Python stack it was blocked in by how long it was blocked
(microseconds), with the wait class: lock (futex under a Python lock), GIL
(futex on the interpreter's GIL), sleep, pipe/read, network/poll, disk I/O,
other; run-queue (preempted: runnable but not running) is reported apart.

Engine: perf_event_open context-switch records per thread (kernel clock,
exact interval lengths; no tracefs). The rings are drained every ~1 ms; a
thread still off CPU then has its Python stack and wait reason read at once
(it cannot change while the thread is off CPU). Waits that began and ended
between two drains were not looked at: their count and time are reported and
folded under [short waits: not read], never guessed. The eBPF engine (stacks
taken in the kernel at switch-out, so short waits get stacks too) is the
next step and not built yet; kernel stacks and --waker need it.

--wall also folds each thread's on-CPU time under [on-CPU] (no stack: use
pyobs record for that), so per thread on-CPU + off-CPU + run-queue = window.

Output: a text summary on stdout by default (per thread on-CPU / off-CPU /
run-queue, top blocked stacks, class totals); with -o the format follows the
file name (svg, folded, pprof, speedscope, gecko, json) unless --format says.
Price: one ring write per context switch in the kernel, plus one stack read
and a few procfs reads per wait longer than ~1 ms; the footer reports the
switch rate, lost records and pyobs's own CPU. The target is never stopped.`,
		Example: `  pyobs offcpu -p 4242 -d 10s -o wait.svg
  pyobs offcpu -p 4242 --format folded --min-block 1ms
  pyobs offcpu -p 4242 --wall --threads -o all.svg
  pyobs offcpu -- python3 job.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runOffcpu(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to watch (default: until Ctrl-C or the target exits)")
	fl.DurationVar(&f.minBlock, "min-block", 0, "leave waits shorter than this out of the profile (still in the totals)")
	fl.BoolVar(&f.wall, "wall", false, "also fold on-CPU time per thread under [on-CPU]")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	return c
}

func runOffcpu(cmd *cobra.Command, g *globals, f *offcpuFlags, args []string) error {
	format := g.format
	if format == "" {
		format = "text"
		if g.output != "" && g.output != "-" {
			format = formatFromName(g.output)
		}
	}
	ok := false
	for _, x := range offcpuFormats {
		ok = ok || x == format
	}
	if !ok {
		return usagef("offcpu: unknown --format %q (%s)", format, strings.Join(offcpuFormats, ", "))
	}
	if format == "pprof" && (g.output == "" || g.output == "-") {
		return usagef("offcpu: pprof output is binary: give -o FILE")
	}
	if f.duration < 0 || f.minBlock < 0 {
		return usagef("offcpu: --duration and --min-block must not be negative")
	}
	s, err := target(cmd, g, args)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if s.Spawned() {
		if err := s.WaitPython(ctx, 0); err != nil {
			s.Kill(2 * time.Second)
			return err
		}
	}
	res, err := offcpu.Run(ctx, s, offcpu.Options{Duration: f.duration, MinBlock: f.minBlock, Wall: f.wall, Threads: f.threads})
	if err != nil && res == nil {
		return err
	}
	var werr error
	switch format {
	case "text", "json", "svg":
		werr = writeOutput(g.output, 0o644, func(w io.Writer) error {
			switch format {
			case "text":
				return writeOffcpuText(w, res)
			case "json":
				return writeOffcpuJSON(w, res)
			}
			what := "off CPU"
			if f.wall {
				what = "on + off CPU"
			}
			return flame.WriteSVG(w, res.Profile, flame.SVGOptions{Title: fmt.Sprintf("pyobs offcpu: pid %d, µs %s", res.Profile.Meta.Pid, what), Icicle: f.icicle})
		})
	default:
		werr = writeProfile(g.output, format, res.Profile, f.icicle)
	}
	if werr != nil {
		return werr
	}
	fmt.Fprintln(cmd.ErrOrStderr(), offcpuFooter(res, g.output))
	if err != nil {
		return err
	}
	if s.Spawned() {
		return waitSpawned(ctx, s)
	}
	return nil
}

type offcpuTop struct {
	Stack   string  `json:"stack"`
	Class   string  `json:"class"`
	US      int64   `json:"us"`
	Percent float64 `json:"percent"` // of all blocked (non-run-queue) time in the profile
}

// topBlocked lists the profile's heaviest waiting stacks (not [on-CPU]).
func topBlocked(p *flame.Profile, n int) []offcpuTop {
	var out []offcpuTop
	var total int64
	for _, s := range p.Stacks() {
		if len(s.Frames) == 0 {
			continue
		}
		leaf := p.Frame(s.Frames[len(s.Frames)-1]).Function
		if leaf == "[on-CPU]" {
			continue
		}
		class := strings.Trim(leaf, "[]")
		if leaf == "[short waits: not read]" {
			class = "not read"
		} else if len(s.Frames) > 1 && p.Frame(s.Frames[len(s.Frames)-2]).Function == "[short waits: not read]" {
			class += " (not read)"
		}
		if !strings.HasPrefix(class, offcpu.ClassRunQueue) {
			total += s.Weight
		}
		out = append(out, offcpuTop{Stack: p.FoldedKey(s), Class: class, US: s.Weight})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].US > out[j].US })
	for i := range out {
		out[i].Percent = 100 * float64(out[i].US) / float64(max(total, 1))
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func writeOffcpuJSON(w io.Writer, r *offcpu.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema int            `json:"schema"`
		Engine string         `json:"engine"`
		Meta   flame.Meta     `json:"meta"`
		Result *offcpu.Result `json:"result"`
		Top    []offcpuTop    `json:"top"`
	}{1, "perf-switch", r.Profile.Meta, r, topBlocked(r.Profile, 50)})
}

func writeOffcpuText(w io.Writer, r *offcpu.Result) error {
	m := r.Profile.Meta
	fmt.Fprintf(w, "pyobs offcpu: pid %d, Python %s, window %.2fs (perf context-switch engine)\n\n", m.Pid, m.Python, r.WindowS)
	fmt.Fprintf(w, "%-28s %9s %9s %9s %9s  %s\n", "THREAD", "ON-CPU", "OFF-CPU", "RUN-QUEUE", "WINDOW", "SHORT WAITS (not read)")
	for _, t := range r.Threads {
		name := fmt.Sprintf("%d", t.Tid)
		if t.Name != "" {
			name = fmt.Sprintf("%s (%d)", t.Name, t.Tid)
		}
		if t.Exited {
			name += " exited"
		}
		fmt.Fprintf(w, "%-28s %8.3fs %8.3fs %8.3fs %8.3fs  %d, %.3fs\n", name, t.OnCPUS, t.OffCPUS, t.RunQS, t.WindowS, t.ShortN, t.ShortS)
	}
	fmt.Fprintf(w, "\nTop blocked stacks (%% of blocked time in the profile; innermost frame last):\n")
	for _, t := range topBlocked(r.Profile, 10) {
		st := t.Stack
		if fr := strings.Split(st, ";"); len(fr) > 4 {
			st = "…;" + strings.Join(fr[len(fr)-4:], ";")
		}
		fmt.Fprintf(w, "  %5.1f %%  %-12s %9.3fs  %s\n", t.Percent, t.Class, float64(t.US)/1e6, st)
	}
	fmt.Fprintf(w, "\nWait classes (all threads):\n")
	for _, c := range offcpu.Classes {
		if v := r.ClassS[c]; v >= 0.0005 {
			fmt.Fprintf(w, "  %-13s %9.3fs\n", c, v)
		}
	}
	if r.ShortS > 0 {
		fmt.Fprintf(w, "  %-13s %9.3fs  (%d waits shorter than a drain, class unknown unless preempted)\n", "not read", r.ShortS, r.ShortN)
	}
	return nil
}

func offcpuFooter(r *offcpu.Result, out string) string {
	where := "stdout"
	if out != "" && out != "-" {
		where = out
	}
	rate := 0.0
	if r.WindowS > 0 {
		rate = float64(r.Switches) / r.WindowS
	}
	obs := ""
	if r.WindowS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*r.ObserverCPUS/r.WindowS)
	}
	return fmt.Sprintf("pyobs offcpu: perf context-switch engine (eBPF: not built yet), %d threads, %d switches in %.1fs (%.0f/s), lost %d; "+
		"%d stack reads (%d discarded: the thread ran during the read); short waits not read: %d, %.3fs (%d of them ≥ 2 drain periods); "+
		"below --min-block: %d, %.3fs; observer CPU %.2fs%s; target stopped 0s; wrote %s",
		len(r.Threads), r.Switches, r.WindowS, rate, r.Lost, r.Looks, r.LookRetries, r.ShortN, r.ShortS, r.ShortLongN,
		r.FilteredN, r.FilteredS, r.ObserverCPUS, obs, where)
}
