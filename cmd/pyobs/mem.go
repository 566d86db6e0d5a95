package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/mem"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/session"
)

type memFlags struct {
	duration time.Duration
	engine   string
	frames   int
	top      int
	minShare float64
	timeout  time.Duration
	tid      int
	nudge    bool
	icicle   bool
	sample   uint64
	native   bool
}

func newMem(g *globals) *cobra.Command {
	var f memFlags
	c := &cobra.Command{
		Use:   "mem (-p PID | -- CMD ARGS) [-d DUR] [--engine auto|tracemalloc|probe]",
		Short: "Where the memory goes over a window: allocation sites that grew, with Python stacks (allocator uprobes; 3.14+: tracemalloc via PEP 768)",
		Long: `mem watches a window and reports the allocation sites that grew in it — what was
allocated during the window and still lives at its end — by bytes, with their
Python stacks, beside the largest sites by size and by count and the
process's RSS/PSS at both ends (/proc/PID/smaps_rollup).

--engine probe (every version; what auto picks before 3.14, or when tracemalloc
is refused):
eBPF uprobes on the interpreter's allocator entry points (PyObject_Malloc,
_Calloc, _Realloc, _Free and the PyMem_ ones), found in the ELF symbols of
libpython or the static binary, for this process only. An allocation is kept
with probability size/--sample-bytes (every block of that size or more) and
its Python stack walked in the kernel at the call; frees delete it; what is
left at the end is the growth, scaled back by the sampling. No cooperation
from the target. Price: a uprobe is a trap — every allocator call pays an
entry and a return trap, every free one, sampled or not (~4 µs each in a
loaded VM: a loop that only allocates ran hundreds of times slower; code pays
in proportion to its allocator calls — keep the window short). The kernel removes the
probes when pyobs exits, SIGKILL included. Cannot see: calls a link-time
optimised build inlined into its callers, memory from malloc directly or
PyMem_Raw* (an extension's plain malloc is not probed).

--native (probe): each kept allocation's native stack too — the calling
thread's registers and up to 16 KiB of its user stack are copied in the
kernel at the call (kept calls only), unwound in pyobs with the mapped files'
CFI, and merged: each eval-loop frame is replaced by the Python frames it
runs, so a C extension's function shows under the Python line that called
it. A stack that could not be unwound to its end says so where its callers
are missing.

--engine tracemalloc (CPython 3.14+; what auto picks there: it sees every
allocation, at a fraction of the probes' price): pyobs runs two
scripts in the target through PEP 768 (see pyobs exec): the first starts
tracemalloc (unless it is on: then it is left on) and snapshots, the second
snapshots, stops it and compares. Price: cooperation plus tracing — every
allocation in the window records its stack (a loop that only allocates ran
9–12x slower with 16 frames, 5–7x with --frames 1, measured in a loaded VM),
and each script pauses the target while it runs (reported). A thread
that pyobs starts in the target stops tracemalloc when pyobs dies (SIGKILL
included) or at the latest a grace period after the window.

Cannot see: allocations before the window, memory C code takes from malloc
directly, native stacks (but probe --native), frames beyond --frames.

Output: text; --format json (growth, by_size, by_count, memory, cost); or a
flame format (svg, folded, pprof, speedscope) of the growth, weighted
in bytes.`,
		Example: `  pyobs mem -p 4242 -d 30s
  pyobs mem -p 4242 -d 10s --format json
  pyobs mem -p 4242 -d 30s -o growth.svg
  pyobs mem -p 4242 -d 30s --engine probe --sample-bytes 1048576
  pyobs mem -p 4242 -d 10s --engine probe --native`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runMem(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 10*time.Second, "the window (Ctrl-C ends it early and still reports; with -p PID the probe engine's ends at the target's exec, reported, exit 3)")
	fl.StringVar(&f.engine, "engine", mem.EngineAuto, "auto (tracemalloc on 3.14+, else probe), probe (allocator uprobes), tracemalloc (3.14+)")
	fl.Uint64Var(&f.sample, "sample-bytes", mem.DefaultSampleBytes, "probe: keep one allocation per this many bytes on average (an allocation of s bytes with probability s/N; 1: every one)")
	fl.BoolVar(&f.native, "native", false, "probe: each kept allocation's native stack too (its user stack copied at the call, unwound with the files' CFI), merged under the Python line that called into C")
	fl.IntVar(&f.frames, "frames", 16, "tracemalloc's traceback limit when pyobs starts it (more frames: more cost)")
	fl.IntVar(&f.top, "top", 20, "sites listed in growth, by size and by count")
	fl.Float64Var(&f.minShare, "min-growth-share", 0.01, "a site enters the growth list when it grew at least this share of the total growth (the rest is summed)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long the target's thread may take to reach a safe point for each script")
	fl.IntVar(&f.tid, "tid", 0, "the thread that runs pyobs's scripts (default: the main thread, or a running Python thread when the main one does not come)")
	fl.BoolVar(&f.nudge, "nudge", false, "interrupt a blocking syscall with a signal the target catches (see pyobs exec --nudge)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: roots at the top")
	return c
}

func runMem(cmd *cobra.Command, g *globals, f *memFlags, args []string) error {
	format, err := profileFormat("mem", g, true)
	if err != nil {
		return err
	}
	if format == "gecko" {
		return usagef("mem: gecko is a time profile; the growth is in bytes: use svg, folded, pprof, speedscope or json")
	}
	opt := mem.Options{Duration: f.duration, Engine: f.engine, Frames: f.frames, Top: f.top,
		MinGrowthShare: f.minShare, Timeout: f.timeout, Tid: f.tid, Nudge: f.nudge, SampleBytes: f.sample, Native: f.native}
	if f.sample == 0 {
		return usagef("mem: --sample-bytes must be at least 1")
	}
	if err := opt.Validate(); err != nil {
		return usageError{err}
	}
	if f.timeout <= 0 {
		return usagef("mem: --timeout must be positive")
	}
	ctx := cmd.Context()
	s, err := openTarget(cmd, g, args, session.PythonRequired)
	if err != nil {
		return err
	}
	res, err := mem.Run(ctx, s, opt)
	if err != nil {
		abort(s)
		return err
	}
	werr := output.Write(g.output, 0o644, func(w io.Writer) error {
		if format == "text" {
			return mem.WriteText(w, res)
		}
		return flame.Write(w, format, mem.Profile(res), flame.WriteOptions{Title: fmt.Sprintf("pyobs mem: growth of pid %d over %.1f s (bytes)", res.Pid, res.WindowS), Icicle: f.icicle, JSON: res})
	})
	if werr != nil {
		abort(s)
		return werr
	}
	if res.Execed != "" {
		return s.Execed() // -p PID exec'd: said, status 3
	}
	return finish(ctx, s)
}
