package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/output"
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
	green    bool
	engine   string
}

func newRecord(g *globals) *cobra.Command {
	var f recordFlags
	c := &cobra.Command{
		Use:   "record (-p PID[,PID…] [--children] | --cgroup DIR | --all | -- CMD ARGS)",
		Short: "Sampling profiler: CPU samples from the kernel, each with its Python stack walked at the sample (sampling: ~1 %)",
		Long:  record.Help,
		Example: `  pyobs record -p 4242 -d 30s -o profile.svg
  pyobs record -p 4242 -F 997 --format pprof -o cpu.pb.gz
  pyobs record --mode wall -p 4242 --format speedscope -o p.json
  pyobs record --threads -p 4242 --format folded
  pyobs record -o out.svg -- python3 app.py
  pyobs record -p 4242 --children -o pool.svg
  pyobs record --cgroup /sys/fs/cgroup/system.slice/app.service -d 10s -o app.svg
  pyobs record --native --kernel -p 4242 -o mixed.svg
  pyobs record --async -p 4242 -o tasks.svg`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runRecord(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.IntVarP(&f.freq, "freq", "F", 99, "samples per second (of CPU time per thread in cpu mode; of wall time otherwise)")
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to record (0, the default: until Ctrl-C or the target exits; -p PID: or execs, exit 3)")
	fl.StringVar(&f.mode, "mode", "cpu", "cpu, wall or gil")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.native, "native", false, "include native (C) frames, unwound from a copy of each sample's user stack, merged with the Python frames")
	fl.BoolVar(&f.kernel, "kernel", false, "include kernel frames (suffix _[k]) from each sample's kernel callchain")
	fl.IntVar(&f.stack, "stack-size", record.DefaultStackSize, "with --native: bytes of user stack copied per sample (multiple of 8, at most 61440)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	fl.BoolVar(&f.async, "async", false, "root samples of asyncio tasks at the task and its awaiters (CPython 3.14+)")
	fl.BoolVar(&f.green, "greenlets", false, "root samples at the running greenlet and its parents (greenlet 3.x, gevent)")
	fl.StringVar(&f.engine, "engine", "auto", "cpu mode: auto (bpf, else perf), bpf (stacks walked in the kernel) or perf (read from user space)")
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
	if f.green && (f.native || f.kernel || f.async || f.engine == "bpf") {
		return usagef("record: --greenlets does not combine with --native, --kernel, --async or --engine bpf yet")
	}
	if f.engine != "auto" && f.engine != "bpf" && f.engine != "perf" {
		return usagef("record: unknown --engine %q (auto, bpf, perf)", f.engine)
	}
	if f.engine == "bpf" && (f.async || f.mode != "cpu") {
		return usagef("record: --engine bpf is cpu mode's (with or without --kernel and --native); --async, wall and gil read stacks from user space")
	}
	if f.engine == "bpf" && f.native && f.stack > record.BPFMaxStackSize {
		return usagef("record: --engine bpf copies at most %d bytes of user stack per sample (--stack-size %d): use --engine perf for more", record.BPFMaxStackSize, f.stack)
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
	opt := record.Options{Mode: f.mode, Duration: f.duration, Threads: f.threads, Native: f.native, Kernel: f.kernel, StackSize: f.stack,
		Engine: f.engine, OnFallback: func(l string) { fmt.Fprintln(os.Stderr, "pyobs record:", l) }}
	var async *record.AsyncStats
	if f.async {
		async = &record.AsyncStats{}
		opt.Async, opt.AsyncStats = true, async
	}
	// A set asked for (not just -- CMD's children, followed by default):
	// refused by the engines that read one process from user space.
	var set record.SetAccount
	opt.SetRequired = setAsked(cmd, g)
	opt.SetAccount = &set
	var green *record.GreenletStats
	if f.green {
		green = &record.GreenletStats{}
		opt.Greenlets, opt.GreenletStats = true, green
	}
	// The bpf engine samples a command from its first instruction: held
	// before its exec while the walker loads.
	spec.Hold = len(spec.Argv) > 0 && opt.HoldsCommand()
	ctx := cmd.Context()
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	opt.Freq = record.Honour(os.Stderr, "record", f.mode, f.freq) // -F above what the kernel or a tick can give: capped or said
	live := output.IsTerminal(os.Stderr)
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
	// -p PID exec'd: the profile of what ran before the exec is written,
	// then the exec is said (exit status 3).
	execed := session.IsExeced(err)
	if err != nil && !execed {
		abort(s) // a held command that never ran is let go unrun
		if errors.Is(err, record.ErrSetNeedsBPF) {
			return usageError{err} // flags that do not go together: exit 2
		}
		return record.WallHint(execFailed(err), f.mode) // perf refused: --mode wall needs no perf events
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
	if green != nil {
		wo.JSON = struct {
			flame.AccountJSON
			Greenlets *record.GreenletStats `json:"greenlets,omitempty"`
		}{flame.Account(prof), green}
	}
	if set.Processes != nil {
		wo.JSON = struct {
			flame.AccountJSON
			record.SetAccount
		}{flame.Account(prof), set}
	}
	if err := writeFlame(g.output, format, prof, wo); err != nil {
		abort(s)
		return err
	}
	fmt.Fprintln(os.Stderr, record.Footer(prof, g.output))
	if set.Processes != nil {
		fmt.Fprintln(os.Stderr, record.SetFooter(&set))
	}
	if async != nil {
		fmt.Fprintln(os.Stderr, record.AsyncFooter(prof, async))
	}
	if green != nil {
		fmt.Fprintln(os.Stderr, record.GreenletFooter(prof, green))
	}
	if execed {
		return err
	}
	return finish(ctx, s)
}
