package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
)

type recordFlags struct {
	freq     int
	duration time.Duration
	mode     string
	threads  bool
	native   bool
	kernel   bool
	stack    int
	icicle   bool
	async    bool
}

var recordFormats = []string{"svg", "folded", "pprof", "speedscope", "gecko", "json"}

func newRecord(g *globals) *cobra.Command {
	var f recordFlags
	c := &cobra.Command{
		Use:   "record (-p PID | -- CMD ARGS)",
		Short: "Sampling profiler: CPU samples from the kernel, each with its Python stack (sampling: ~1 %)",
		Long: `record samples the target and writes a flame graph or profile.

--mode cpu (default): the kernel samples each thread's CPU time (perf_event_open,
  task-clock, F Hz of CPU time per thread); each sample is followed at once by
  a read of that thread's Python stack. Off-CPU time is invisible here by
  construction: use --mode wall or pyobs offcpu.
--mode wall: a timer reads every thread's stack at F Hz, running or not; each
  stack ends in the thread's state ([running], [sleeping in …]).
--mode gil: a timer reads the stack of the thread holding the GIL ([GIL free]
  when nobody holds it).
--native (cpu mode): each sample also copies the thread's user registers and
  --stack-size bytes of its stack; pyobs unwinds them with the ELF files'
  .eh_frame CFI and replaces each _PyEval_EvalFrameDefault frame with the
  Python frames it runs: on 3.11+ by address (each run of Python frames
  links to a struct on its eval loop's C stack), on 3.10 by count. The
  Python stack is read just after the sample: frames entered since are left
  out, eval loops that returned since show [Python frames returned before
  read]. Stacks deeper than the copy end in [truncated native stack];
  samples whose native and Python stacks disagree are kept unmerged under
  [merge mismatch] and counted.
--kernel (cpu mode): kernel frames (SYMBOL_[k]) from the sample's callchain.
--async (CPython 3.14+): a sample of a thread that is running an asyncio task
  is rooted at "[task] NAME" frames, the tasks awaiting it first (outermost
  awaiter first; the lowest-addressed one when several await a task), then
  the task's own coroutine and what it calls; the event loop's frames below
  the coroutine are dropped. Samples outside any task keep the loop's frames.
  Read from the thread state's running task and each task's awaited_by;
  before 3.14 no such per-thread record exists: pyobs exits with status 5.

Price: sampling. The target is never stopped; a stack that changed while it
was read is counted as torn and shown as [torn read], never guessed. The end
of the run reports requested vs achieved rate, samples lost/torn/failed and
pyobs's own CPU. Ctrl-C ends the recording early and still writes the output.`,
		Example: `  pyobs record -p 4242 -d 30s -o profile.svg
  pyobs record -p 4242 -F 997 --format pprof -o cpu.pb.gz
  pyobs record --mode wall -p 4242 --format speedscope -o p.json
  pyobs record --threads -p 4242 --format folded
  pyobs record -o out.svg -- python3 app.py
  pyobs record --native --kernel -p 4242 -o mixed.svg
  pyobs record --async -p 4242 -o tasks.svg`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runRecord(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.IntVarP(&f.freq, "freq", "F", 99, "samples per second (of CPU time per thread in cpu mode; of wall time otherwise)")
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to record (default: until Ctrl-C or the target exits)")
	fl.StringVar(&f.mode, "mode", "cpu", "cpu, wall or gil")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.native, "native", false, "include native (C) frames, unwound from a copy of each sample's user stack, merged with the Python frames")
	fl.BoolVar(&f.kernel, "kernel", false, "include kernel frames (suffix _[k]) from each sample's kernel callchain")
	fl.IntVar(&f.stack, "stack-size", record.DefaultStackSize, "with --native: bytes of user stack copied per sample (multiple of 8, at most 61440)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	fl.BoolVar(&f.async, "async", false, "root samples of asyncio tasks at the task and its awaiters (CPython 3.14+)")
	return c
}

// formatFromName guesses the format from the output file's name.
func formatFromName(path string) string {
	switch p := strings.ToLower(path); {
	case strings.HasSuffix(p, ".svg"):
		return "svg"
	case strings.HasSuffix(p, ".pb.gz"), strings.HasSuffix(p, ".pb"), strings.HasSuffix(p, ".pprof"):
		return "pprof"
	case strings.HasSuffix(p, ".folded"), strings.HasSuffix(p, ".txt"), strings.HasSuffix(p, ".collapsed"):
		return "folded"
	case strings.HasSuffix(p, ".speedscope.json"):
		return "speedscope"
	case strings.HasSuffix(p, ".gecko.json"):
		return "gecko"
	case strings.HasSuffix(p, ".json"):
		return "json"
	}
	return "svg"
}

func runRecord(cmd *cobra.Command, g *globals, f *recordFlags, args []string) error {
	format := g.format
	if format == "" {
		format = formatFromName(g.output)
	}
	ok := false
	for _, x := range recordFormats {
		ok = ok || x == format
	}
	if !ok {
		return usagef("record: unknown --format %q (%s)", format, strings.Join(recordFormats, ", "))
	}
	if format == "pprof" && (g.output == "" || g.output == "-") {
		return usagef("record: pprof output is binary: give -o FILE")
	}
	if f.freq <= 0 || f.freq > 100000 {
		return usagef("record: -F %d is outside 1..100000", f.freq)
	}
	if f.mode != "cpu" && f.mode != "wall" && f.mode != "gil" {
		return usagef("record: unknown --mode %q (cpu, wall, gil)", f.mode)
	}
	if (f.native || f.kernel) && f.mode != "cpu" {
		return usagef("record: --native and --kernel need --mode cpu")
	}
	if f.async && (f.native || f.kernel) {
		return usagef("record: --async does not combine with --native or --kernel yet")
	}
	if f.stack <= 0 || f.stack > 61440 || f.stack%8 != 0 {
		return usagef("record: --stack-size %d is not a multiple of 8 in 8..61440", f.stack)
	}
	if f.duration < 0 {
		return usagef("record: --duration must not be negative")
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
	opt := record.Options{Mode: f.mode, Freq: f.freq, Duration: f.duration, Threads: f.threads, Native: f.native, Kernel: f.kernel, StackSize: f.stack}
	var async *record.AsyncStats
	if f.async {
		async = &record.AsyncStats{}
		opt.Async, opt.AsyncStats = true, async
	}
	live := isTerminal(os.Stderr)
	if live {
		opt.Progress = func(p record.Progress) {
			fmt.Fprintf(os.Stderr, "\r\x1b[Krecording pid %d: %.1fs, %d samples, %.0f Hz achieved, lost %d, torn %d, late %d, observer CPU %.2fs",
				s.Pid, p.Elapsed.Seconds(), p.Samples, p.AchievedHz, p.Lost, p.Torn, p.Late, p.ObserverCPU.Seconds())
		}
	}
	prof, err := record.Run(ctx, s, opt)
	if live {
		fmt.Fprint(os.Stderr, "\r\x1b[K")
	}
	if err != nil {
		if s.Spawned() {
			s.Kill(2 * time.Second)
		}
		return err
	}
	if note := prof.Meta.KernelSymbols; note != "" {
		fmt.Fprintln(os.Stderr, "pyobs record:", note) // record --kernel: why kernel frames are unnamed
	}
	if err := writeRecording(g.output, format, prof, f.icicle, async); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, footer(prof, g.output))
	if async != nil {
		fmt.Fprintln(os.Stderr, asyncFooter(prof, async))
	}
	if s.Spawned() {
		return waitSpawned(ctx, s)
	}
	return nil
}

func footer(p *flame.Profile, out string) string {
	m := p.Meta
	rate := fmt.Sprintf("requested %g Hz, achieved %.0f Hz", m.RequestedHz, m.AchievedHz)
	if m.Mode == "cpu" {
		rate += " per CPU-second of the target"
		if m.StackReads > 0 && m.StackReads < m.Samples {
			rate += fmt.Sprintf("; %d stack reads, each for the samples since the thread's previous read", m.StackReads)
		}
	}
	obs := ""
	if m.DurationS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*m.ObserverCPUS/m.DurationS)
	}
	where := "stdout"
	if out != "" && out != "-" {
		where = out
	}
	lag := ""
	if m.ReadLagUS > 0 {
		lag = fmt.Sprintf(", late %d (mean read lag %.0f µs), moved %d", m.Late, m.ReadLagUS, m.Moved)
	}
	nat := ""
	if n := m.NativeFull + m.NativeTruncated + m.NativeFailed; n > 0 {
		nat = fmt.Sprintf("; native stacks: %d unwound fully (%.1f %%), %d truncated, %d failed, %d merge mismatches",
			m.NativeFull, 100*float64(m.NativeFull)/float64(n), m.NativeTruncated, m.NativeFailed, m.MergeMismatch)
		if m.MergeLinked > 0 {
			nat += fmt.Sprintf(", %d glued by C-stack address (%d with Python frames returned before read)", m.MergeLinked, m.MergeGone)
		}
	}
	return fmt.Sprintf("pyobs record: %s mode, %d samples in %.1fs (%s); lost %d, torn %d, failed %d, throttled %d%s%s; observer CPU %.2fs%s; target stopped 0s; wrote %s",
		m.Mode, m.Samples, m.DurationS, rate, m.Lost, m.Torn, m.Failed, m.Throttled, lag, nat, m.ObserverCPUS, obs, where)
}

// asyncFooter is record --async's account: how many samples were rooted at
// a task, what could not be, and the observer's CPU per sample.
func asyncFooter(p *flame.Profile, a *record.AsyncStats) string {
	m := p.Meta
	pct := 0.0
	if m.Samples > 0 {
		pct = 100 * float64(a.InTask) / float64(m.Samples)
	}
	per := 0.0
	if m.Samples > 0 {
		per = 1e6 * m.ObserverCPUS / float64(m.Samples)
	}
	s := fmt.Sprintf("pyobs record --async: %d samples rooted at a task (%.1f %%), %d outside any task, %d task changed during the read, %d task unreadable, %d awaiter chain cut, %d with the coroutine off the stack; %d task reads; observer CPU %.1f µs per sample",
		a.InTask, pct, a.NoTask, a.Changed, a.Unreadable, a.ChainCut, a.CoroNotOnStack, a.TaskReads, per)
	if a.Note != "" {
		s += "; " + a.Note
	}
	return s
}

func writeProfile(out, format string, p *flame.Profile, icicle bool) error {
	return writeRecording(out, format, p, icicle, nil)
}

// writeRecording is writeProfile with record --async's account in the JSON.
func writeRecording(out, format string, p *flame.Profile, icicle bool, async *record.AsyncStats) error {
	return writeOutput(out, 0o644, func(w io.Writer) error {
		switch format {
		case "folded":
			return flame.WriteFolded(w, p)
		case "pprof":
			return flame.WritePprof(w, p)
		case "speedscope":
			return flame.WriteSpeedscope(w, p)
		case "gecko":
			return flame.WriteGecko(w, p)
		case "json":
			return writeProfileJSON(w, p, async)
		}
		return flame.WriteSVG(w, p, flame.SVGOptions{Title: fmt.Sprintf("pyobs record: pid %d, %s mode", p.Meta.Pid, p.Meta.Mode), Icicle: icicle})
	})
}

// writeProfileJSON writes the recording's account and its heaviest stacks.
func writeProfileJSON(w io.Writer, p *flame.Profile, async *record.AsyncStats) error {
	type top struct {
		Stack   string  `json:"stack"`
		Weight  int64   `json:"weight"`
		Percent float64 `json:"percent"`
	}
	stacks := p.Stacks()
	sort.SliceStable(stacks, func(i, j int) bool { return stacks[i].Weight > stacks[j].Weight })
	total := p.Total()
	var tops []top
	for i, s := range stacks {
		if i == 50 {
			break
		}
		tops = append(tops, top{p.FoldedKey(s), s.Weight, 100 * float64(s.Weight) / float64(max(total, 1))})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema int                `json:"schema"`
		Meta   flame.Meta         `json:"meta"`
		Total  int64              `json:"total"`
		Stacks int                `json:"unique_stacks"`
		Top    []top              `json:"top"`
		Async  *record.AsyncStats `json:"async,omitempty"`
	}{1, p.Meta, total, len(stacks), tops, async})
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
