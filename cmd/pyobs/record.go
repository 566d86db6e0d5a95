package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/session"
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
pyobs's own CPU. Ctrl-C ends the recording early and still writes the output.

-d 0s (the default) records until Ctrl-C or the target's exit. -F is per
thread; in cpu mode it is capped at kernel.perf_event_max_sample_rate (the
most the kernel delivers per CPU), and wall/gil mode above 1000 Hz say at the
start that ticks will be dropped; the footer gives the achieved rate.`,
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
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to record (0, the default: until Ctrl-C or the target exits)")
	fl.StringVar(&f.mode, "mode", "cpu", "cpu, wall or gil")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.native, "native", false, "include native (C) frames, unwound from a copy of each sample's user stack, merged with the Python frames")
	fl.BoolVar(&f.kernel, "kernel", false, "include kernel frames (suffix _[k]) from each sample's kernel callchain")
	fl.IntVar(&f.stack, "stack-size", record.DefaultStackSize, "with --native: bytes of user stack copied per sample (multiple of 8, at most 61440)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	fl.BoolVar(&f.async, "async", false, "root samples of asyncio tasks at the task and its awaiters (CPython 3.14+)")
	return c
}

func runRecord(cmd *cobra.Command, g *globals, f *recordFlags, args []string) error {
	format, err := profileFormat("record", g, false)
	if err != nil {
		return err
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
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	f.freq = record.Honour(os.Stderr, f.mode, f.freq) // -F above what the kernel or a tick can give: capped or said
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
		abort(s)
		return record.WallHint(err, f.mode) // perf refused: --mode wall needs no perf events
	}
	if note := prof.Meta.KernelNote(); note != "" {
		fmt.Fprintln(os.Stderr, "pyobs record:", note) // record --kernel: why kernel frames are unnamed
	}
	wo := flame.WriteOptions{Title: fmt.Sprintf("pyobs record: pid %d, %s mode", prof.Meta.Pid, prof.Meta.Mode), Icicle: f.icicle}
	if async != nil {
		wo.JSON = struct {
			flame.AccountJSON
			Async *record.AsyncStats `json:"async,omitempty"`
		}{flame.Account(prof), async}
	}
	if err := writeFlame(g.output, format, prof, wo); err != nil {
		abort(s)
		return err
	}
	fmt.Fprintln(os.Stderr, record.Footer(prof, g.output))
	if async != nil {
		fmt.Fprintln(os.Stderr, record.AsyncFooter(prof, async))
	}
	return finish(ctx, s)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
