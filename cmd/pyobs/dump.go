package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/greenlet"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/session"
)

type dumpFlags struct {
	locals bool
	lock   bool
	native bool
	after  time.Duration
	kill   bool
	tasks  bool
	green  bool
	stack  int
}

func newDump(g *globals) *cobra.Command {
	var f dumpFlags
	c := &cobra.Command{
		Use:   "dump (-p PID | -- CMD ARGS)",
		Short: "Print every thread's Python stack now (introspection: reads memory, stops nothing)",
		Long: `dump reads every thread's Python stack from the target's memory.

Price: introspection. By default the target is not stopped: each stack is read
while the thread runs, validated, and re-read if it changed underneath
(reported per thread as consistent or not). --lock stops all threads with
PTRACE_SEIZE+INTERRUPT for a frozen snapshot and resumes them at once (a
process already stopped by SIGSTOP/SIGTSTP is read and left stopped). A
stack deeper than 4096 frames shows its innermost 4096, marked truncated.
[holds GIL] marks the thread that held the GIL from before the stacks and
the threads' states were read to after; when it changed hands meanwhile,
nobody is marked and the header says so.
Cannot see: native (C) frames (without --native), and anything between two reads.

A thread running a sub-interpreter's code is one thread: the sub-interpreter's
frames on top of the calling interpreter's, each part after a line "In
interpreter N:".

--native adds each thread's native (C) frames, in call order with its
Python frames. It implies --lock: while the threads are stopped pyobs reads
each one's registers (PTRACE_GETREGS) and copies its stack from the stack
pointer up (--stack-size bytes, at most to the end of the stack mapping),
then resumes them and unwinds the copies with the ELF files' .eh_frame CFI.
Each interpreter frame (_PyEval_EvalFrameDefault) is replaced by the Python
frames it runs, matched by C-stack address (3.11+; 3.10: by count); in a
binary stripped to .dynsym the eval loop is the unnamed frame that holds
them. Both stacks are read while the thread is stopped, so a thread whose
stacks do not glue is a bug: it is counted, marked, and both stacks are
shown apart. Kernel frames are not read (use record --kernel). Threads
without a Python thread state are not listed.

--tasks prints the asyncio task tree instead: each task, the coroutines it is
suspended in (outermost first, with file:line), and the tasks awaiting it
below their awaiter, like python -m asyncio pstree; the running task of each
thread is marked, and every thread's stack follows. 3.14+: read through the
_asyncio module's AsyncioDebug offsets, complete. 3.12/3.13: read from the
asyncio module's task sets with per-version offsets; a task's thread and
awaiters are not recorded there, and the output lists what is rebuilt and
how (a thread's running task: the task whose coroutine frame, by address,
is on the thread's frame chain). Before 3.12 it says so and shows the thread stacks only.

--greenlets prints every greenlet (greenlet 3.x, gevent) instead, under its
thread: id, type, state (running, suspended, not started, dead but still
referenced), parent chain, and its Python stack — for a suspended greenlet
the frames saved in its greenlet object, for the running one its thread's
stack. Greenlets are found by walking the interpreter's GC lists (read page by
page: ~10 ms for 15 k objects) and read with a per-greenlet-version layout;
an unknown greenlet version is said in one line and the thread stacks are
still printed. It is its own view, not part of --tasks: a greenlet has a
parent and a saved C stack, not awaiters, and a process rarely runs both.

With -- CMD ARGS, pyobs starts CMD, dumps once its interpreter runs Python
code and --after has passed, then lets it run to its end (or --kill).

A set (-p A,B; --children: the descendants living now; --cgroup DIR; --all)
prints each process's threads under its own header; a process that is not
Python or may not be read is listed as refused with its reason. --lock stops
one process at a time. -- CMD follows CMD's children by default and prints
a set when it has some. --tasks and --greenlets read one process.`,
		Example: `  pyobs dump -p 4242
  pyobs dump -p 4242 --format json
  pyobs dump --locals -p 4242
  pyobs dump --native -p 4242
  pyobs dump --after 2s -- python3 app.py
  pyobs dump --tasks -p 4242
  pyobs dump --greenlets -p 4242
  pyobs dump -p 4242,4243
  pyobs dump -p 4242 --children
  pyobs dump --cgroup /sys/fs/cgroup/system.slice/app.service`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runDump(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.BoolVar(&f.locals, "locals", false, "include simple local variables (None/bool/int/float/str/bytes; len of containers); output file is created 0600")
	fl.BoolVar(&f.lock, "lock", false, "stop the threads (PTRACE_SEIZE+INTERRUPT) while reading, for a consistent snapshot")
	fl.BoolVar(&f.native, "native", false, "include native (C) frames, glued in call order; implies --lock (threads stopped while registers and stacks are read); no kernel frames")
	fl.IntVar(&f.stack, "stack-size", dump.DefaultStackSize, "with --native: bytes of each thread's stack copied (4096..16777216); a deeper stack ends in [truncated native stack]")
	fl.DurationVar(&f.after, "after", time.Second, "with -- CMD: how long to let the program run after its first Python frame before dumping")
	fl.BoolVar(&f.tasks, "tasks", false, "print the asyncio task tree (task → awaited coroutine chain → awaited tasks); CPython 3.12+ (complete on 3.14+)")
	fl.BoolVar(&f.green, "greenlets", false, "print every greenlet (greenlet 3.x, gevent): state, parent chain, its Python stack; CPython 3.10+")
	fl.BoolVar(&f.kill, "kill", false, "with -- CMD: end the program after the dump instead of waiting for it")
	return c
}

func runDump(cmd *cobra.Command, g *globals, f *dumpFlags, args []string) error {
	format, err := textFormat("dump", g, "text")
	if err != nil {
		return err
	}
	opt := dump.Options{Locals: f.locals, Lock: f.lock, Native: f.native, StackSize: f.stack, Tasks: f.tasks}
	if err := opt.Validate(); err != nil {
		return usageError{err}
	}
	if f.green && (f.tasks || f.native) {
		return usagef("dump: --greenlets does not combine with --tasks or --native")
	}
	if f.after < 0 {
		return usagef("dump: --after must not be negative")
	}
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	if len(spec.Argv) == 0 && (cmd.Flags().Changed("after") || f.kill) {
		// They say what to do with a program pyobs starts: taken for a
		// -p process they would be silently ignored.
		return usagef("dump: --after and --kill apply to -- CMD (a process given with -p is read now and left running)")
	}
	spec.After = f.after
	// A set the user asked for is printed as a set; -- CMD's implicit
	// --children only when CMD has children at the dump's instant.
	explicitSet := setAsked(cmd, g)
	if explicitSet && (f.green || f.tasks) {
		return usagef("dump: --tasks and --greenlets read one process: give one -p PID without --children, --cgroup or --all")
	}
	if f.green || f.tasks {
		spec.Set.Children = false
	}
	if explicitSet && len(spec.Argv) == 0 {
		// The first -p need not be Python: a set's process that is not is
		// listed as refused; only a set with none to read is an error.
		spec.Python = session.PythonOptional
	}
	ctx := cmd.Context()
	if spec.Pid > 0 && len(spec.Argv) == 0 && !spec.Set.Many() && !f.green {
		// One running process: its threads' states are read while the
		// session opens (dump.Options.EarlyStates).
		opt.States = opt.EarlyStates(spec.Pid)
	}
	s, err := session.Open(ctx, spec)
	if err != nil {
		var ie *session.InterruptedError
		if errors.As(err, &ie) {
			ie.Before = "the dump"
		}
		return err
	}
	if f.native && !f.lock {
		// Said once there is a target: a bad pid gets its one line only.
		opt.Lock = true
		fmt.Fprintln(os.Stderr, "pyobs dump: --native implies --lock: the threads are stopped while their registers and stacks are read")
	}
	var out any
	var text func(io.Writer) error
	if f.green {
		d, e := greenlet.Run(ctx, s, opt)
		out, text, err = d, func(w io.Writer) error { return greenlet.WriteText(w, d) }, e
	} else if f.tasks {
		d, e := dump.RunTasks(ctx, s, opt)
		out, text, err = d, func(w io.Writer) error { return dump.WriteTasksText(w, d) }, e
	} else if spec.Set.Many() {
		sd, e := dump.RunSet(ctx, s, opt)
		out, text, err = sd, func(w io.Writer) error { return dump.WriteSetText(w, sd) }, e
		if e == nil && !explicitSet {
			if d := sd.One(); d != nil {
				out, text = d, func(w io.Writer) error { return dump.WriteText(w, d) }
			}
		}
	} else {
		d, e := dump.Run(ctx, s, opt)
		out, text, err = d, func(w io.Writer) error { return dump.WriteText(w, d) }, e
	}
	if err != nil {
		err = s.Ended("the dump", err) // the program ended before --after: its status, said
		abort(s)
		return err
	}
	mode := os.FileMode(0o644)
	if f.locals {
		mode = 0o600 // locals can hold secrets
	}
	err = output.Write(g.output, mode, func(w io.Writer) error {
		if format == "json" {
			return writeJSON(w, out)
		}
		return text(w)
	})
	if err != nil || f.kill {
		abort(s)
		return err
	}
	return finish(ctx, s)
}
