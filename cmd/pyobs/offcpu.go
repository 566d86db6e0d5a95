package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/session"
)

type offcpuFlags struct {
	duration time.Duration
	minBlock time.Duration
	wall     bool
	threads  bool
	icicle   bool
	engine   string
	mapSize  uint32
	exclude  []string
	waker    bool
	green    bool
}

func newOffcpu(g *globals) *cobra.Command {
	var f offcpuFlags
	c := &cobra.Command{
		Use:   "offcpu (-p PID | -- CMD ARGS)",
		Short: "Where threads wait: blocked time (µs) by Python stack, with the reason (tracing context switches)",
		Long: `offcpu measures every off-CPU interval of every thread of the target and
weights the Python stack it was blocked in by how long it was blocked
(microseconds), with the wait class: lock (futex under a Python lock), GIL
(futex on the interpreter's GIL), sleep (also a select or poll given no
descriptor and a timeout: CPython 3.10's time.sleep), pipe/read,
network/poll, disk I/O, stopped (by a signal — SIGSTOP, job control — or a
tracer: the thread did not wait for anything of its own; bpf: from the
switch-out's state, perf: from /proc's T/t), other; run-queue (preempted: runnable but not running)
is reported apart.

Engines (--engine auto|bpf|perf; auto: bpf, else perf, saying why on
stderr). Both time every interval with the kernel's clock and read a
thread's Python stack while it is off CPU (every ~1 ms; it cannot change
then); a wait that began and ended between two looks has no Python stack
and is folded under [short waits: not read], never guessed.
  bpf: an eBPF program on sched_switch (tp_btf, else raw_tp; needs CAP_BPF
    and CAP_PERFMON or root) takes each wait's kernel stack, state and
    syscall at the switch-out and sums the intervals in the kernel: short
    waits too get their kernel stack and class, and the profile shows kernel
    frames (SYMBOL_[k]) under the Python ones. User stacks: only the
    innermost native frame (CPython here has no frame pointers).
  perf: perf_event_open context-switch records per thread; the class of a
    wait comes from procfs while it lasts, so short waits have none (run-
    queue excepted) and there are no kernel frames.
--waker (bpf engine only; refused with --engine perf, and no fallback):
a second program on sched_waking notes who woke each target thread, and
each wait it ended is folded with its waker after the class: the blocked
stack, [lock], then "[woken by] NAME (TID, this process)" for a thread of
the target (its thread name), "[woken by] COMM (TID, pid PID)" for another
process, "(0: an interrupt on an idle CPU)" for the idle task, then the
waker's kernel frames — which thread's lock release, which pipe write or
timer interrupt ended the wait. A wake-up made in interrupt context (the
waker's kernel stack holds a hard IRQ's or softirq's handler, or a timer
callback such as hrtimer_wakeup) is the interrupt's, not the thread's it
happened to interrupt: "[woken by] [interrupt: timer] while NAME (TID,
this process) ran", or "... on an idle CPU". Waits nobody woke in the window (still
blocked at the end, preempted) have no waker.

--exclude REGEXP (repeatable) leaves out of the profile every stack with a
frame whose label matches (the folded label: "func (file:line)", kernel
frames "SYMBOL_[k]", classes "[lock]"): for legitimate idle waits such as
an event loop's epoll_wait or a pool's idle workers. How much was left out
is reported; the per-thread and class totals still include it.

--wall also folds each thread's on-CPU time under [on-CPU] (no stack: use
pyobs record for that), so per thread on-CPU + off-CPU + run-queue = window.

Output: a text summary on stdout by default (per thread on-CPU / off-CPU /
run-queue, top blocked stacks, class totals); with -o the format follows the
file name (svg, folded, pprof, speedscope, gecko, json) unless --format says.
Price: per context switch of the target a few map updates and a kernel
stack walk (bpf; the walk is skipped when a thread blocks again in the same
syscall on the same fd or futex within 10 ms, reusing its last stack) or
one ring write (perf), plus one Python stack read per wait longer than
~1 ms; the bpf program also runs (a compare) on every switch of the machine. The footer reports the switch rates, drops or lost
records and pyobs's own CPU. The target is never stopped.

-- CMD (bpf engine) is held before its exec while the program loads, and
observed from its first instruction: its waits before its interpreter is
up keep their time, class and kernel stack under [before the interpreter]
(a wait still going on once it is up gets its Python stack then).

Sets (bpf engine): -- CMD follows what CMD forks or spawns (default);
-p PID --children, -p A,B, --cgroup DIR and --all observe several
processes; each stack is rooted at "[pid N] argv…" and stderr accounts
for every process (how it joined, exited, its on/off-CPU seconds, why its
stacks were not named: another CPython build). The perf engine observes
the target alone and says so; --greenlets refuses a set.

--greenlets (greenlet 3.x, gevent; runs the perf engine): each wait is
rooted at "[greenlet] NAME" frames of the greenlet its thread was running
(read while the wait lasted: a thread cannot switch greenlets off CPU) and
of its parents. A gevent hub's wait in its event loop (epoll/poll) is given
to the greenlets parked in a gevent wait during it, each under its own
stack as [greenlet wait] — summed over greenlets, so it may exceed wall
time; a hub wait that cannot be told (no scan around it, a failed scan,
greenlets changed between scans) stays under the hub with the reason. A
greenlet that blocks its thread for real (unpatched time.sleep, a lock)
keeps that wait under its own root. Price: one greenlet scan (a GC walk,
~10 ms on a small program) every 200 ms or 20x its duration.`,
		Example: `  pyobs offcpu -p 4242 -d 10s -o wait.svg
  pyobs offcpu -p 4242 --format folded --min-block 1ms
  pyobs offcpu -p 4242 --wall --threads -o all.svg
  pyobs offcpu -p 4242 --engine perf          # no eBPF: context-switch records
  pyobs offcpu -p 4242 --waker -o wake.svg    # and who woke each wait
  pyobs offcpu -p 4242 --exclude '_worker \(.*concurrent/futures/thread.py' --exclude 'BaseSelectorEventLoop.select' 
  pyobs offcpu -p 4242 --greenlets -o gevent.svg   # gevent: waits per greenlet
  pyobs offcpu -- python3 job.py
  pyobs offcpu -p 4242 --children -o pool.svg   # a process and its workers`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runOffcpu(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to watch (default: until Ctrl-C or the target exits; -p PID: or execs, exit 3)")
	fl.DurationVar(&f.minBlock, "min-block", 0, "leave waits shorter than this out of the profile (still in the totals)")
	fl.BoolVar(&f.wall, "wall", false, "also fold on-CPU time per thread under [on-CPU]")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	fl.StringVar(&f.engine, "engine", "auto", "auto (bpf, else perf), bpf or perf")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "leave out stacks with a frame whose label matches this regexp (repeatable); the amount left out is reported")
	fl.BoolVar(&f.waker, "waker", false, "bpf engine: fold each wait with the thread that woke it ([woken by] and its kernel stack)")
	fl.BoolVar(&f.green, "greenlets", false, "root waits at the running greenlet; give a gevent hub's waits to the greenlets parked in them (perf engine)")
	fl.Uint32Var(&f.mapSize, "bpf-map-entries", 0, "size of the bpf engine's hash maps (tests of its bounds)")
	_ = fl.MarkHidden("bpf-map-entries")
	return c
}

func runOffcpu(cmd *cobra.Command, g *globals, f *offcpuFlags, args []string) error {
	format, err := profileFormat("offcpu", g, true)
	if err != nil {
		return err
	}
	excl, err := offcpu.CompileExclude(f.exclude)
	if err != nil {
		return usageError{err}
	}
	stderr := cmd.ErrOrStderr()
	opt := offcpu.Options{Engine: f.engine, Duration: f.duration, MinBlock: f.minBlock, Wall: f.wall,
		Threads: f.threads, MapEntries: f.mapSize, Waker: f.waker, Exclude: excl, Greenlets: f.green,
		OnFallback: func(line string) { fmt.Fprintln(stderr, "pyobs offcpu: "+line) }}
	if err := opt.Validate(); err != nil {
		return usageError{err}
	}
	// A set asked for (not just -- CMD's children, followed by default).
	opt.SetAsked = setAsked(cmd, g)
	if f.green && opt.SetAsked {
		return usagef("offcpu: --greenlets observes one process: give no several -p, --children, --cgroup or --all with it")
	}
	ctx := cmd.Context()
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	spec.Python = session.PythonRequired
	spec.Hold = len(spec.Argv) > 0 && opt.HoldsCommand()
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	res, err := offcpu.Run(ctx, s, opt)
	if err != nil && res == nil {
		abort(s) // a held command that never ran is let go unrun
		return execFailed(err)
	}
	werr := output.Write(g.output, 0o644, func(w io.Writer) error { return offcpu.Write(w, format, res, f.wall, f.icicle) })
	if werr != nil {
		abort(s)
		return werr
	}
	fmt.Fprintln(stderr, offcpu.Footer(res, output.Where(g.output)))
	if l := offcpu.SetFooter(res); l != "" {
		fmt.Fprintln(stderr, l)
	}
	if l := offcpu.GreenletFooter(res); l != "" {
		fmt.Fprintln(stderr, l)
	}
	if err != nil {
		abort(s)
		return err
	}
	return finish(ctx, s)
}
