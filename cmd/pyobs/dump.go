package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/session"
)

type dumpFlags struct {
	locals bool
	lock   bool
	native bool
	after  time.Duration
	kill   bool
	tasks  bool
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
PTRACE_SEIZE+INTERRUPT for a frozen snapshot and resumes them at once.
Cannot see: native (C) frames (without --native), and anything between two reads.

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
how. Before 3.12 it says so and shows the thread stacks only.

With -- CMD ARGS, pyobs starts CMD, dumps once its interpreter runs Python
code and --after has passed, then lets it run to its end (or --kill).`,
		Example: `  pyobs dump -p 4242
  pyobs dump -p 4242 --format json
  pyobs dump --locals -p 4242
  pyobs dump --native -p 4242
  pyobs dump --after 2s -- python3 app.py
  pyobs dump --tasks -p 4242`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runDump(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.BoolVar(&f.locals, "locals", false, "include simple local variables (None/bool/int/float/str/bytes; len of containers); output file is created 0600")
	fl.BoolVar(&f.lock, "lock", false, "stop the threads (PTRACE_SEIZE+INTERRUPT) while reading, for a consistent snapshot")
	fl.BoolVar(&f.native, "native", false, "include native (C) frames, glued in call order; implies --lock (threads stopped while registers and stacks are read); no kernel frames")
	fl.IntVar(&f.stack, "stack-size", session.DefaultDumpStackSize, "with --native: bytes of each thread's stack copied (4096..16777216); a deeper stack ends in [truncated native stack]")
	fl.DurationVar(&f.after, "after", time.Second, "with -- CMD: how long to let the program run after its first Python frame before dumping")
	fl.BoolVar(&f.tasks, "tasks", false, "print the asyncio task tree (task → awaited coroutine chain → awaited tasks); CPython 3.12+ (complete on 3.14+)")
	fl.BoolVar(&f.kill, "kill", false, "with -- CMD: end the program after the dump instead of waiting for it")
	return c
}

func runDump(cmd *cobra.Command, g *globals, f *dumpFlags, args []string) error {
	format := g.format
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" {
		return usagef("dump: unknown --format %q (text, json)", format)
	}
	if f.stack < 4096 || f.stack > 16<<20 {
		return usagef("dump: --stack-size %d is not in 4096..16777216", f.stack)
	}
	if f.native && f.tasks {
		return usagef("dump: --native does not combine with --tasks")
	}
	if f.after < 0 {
		return usagef("dump: --after must not be negative")
	}
	s, err := target(cmd, g, args)
	if err != nil {
		return err
	}
	if f.native && !f.lock {
		// Said once there is a target: a bad pid gets its one line only.
		f.lock = true
		fmt.Fprintln(os.Stderr, "pyobs dump: --native implies --lock: the threads are stopped while their registers and stacks are read")
	}
	ctx := cmd.Context()
	if s.Spawned() {
		defer func() {
			if f.kill {
				s.Kill(2 * time.Second)
			}
		}()
		if err := s.WaitPython(ctx, f.after); err != nil {
			s.Kill(2 * time.Second)
			return err
		}
	}
	if f.tasks {
		return runDumpTasks(ctx, s, g, f, format)
	}
	d, err := s.Dump(session.DumpOptions{Locals: f.locals, Lock: f.lock, Native: f.native, StackSize: f.stack})
	if err != nil {
		if s.Spawned() {
			s.Kill(2 * time.Second)
		}
		return err
	}
	return finishDump(ctx, s, g, f, format, d, func(w io.Writer) error { return writeDumpText(w, d) })
}

// finishDump writes a dump (JSON, or text by writeText) and, for a spawned
// target, lets it run to its end unless --kill.
func finishDump(ctx context.Context, s *session.Session, g *globals, f *dumpFlags, format string, d any, writeText func(io.Writer) error) error {
	mode := os.FileMode(0o644)
	if f.locals {
		mode = 0o600 // locals can hold secrets
	}
	err := writeOutput(g.output, mode, func(w io.Writer) error {
		if format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		}
		return writeText(w)
	})
	if err != nil {
		return err
	}
	if s.Spawned() && !f.kill {
		return waitSpawned(ctx, s)
	}
	return nil
}

// waitSpawned lets a spawned target run to its end and passes on its status.
func waitSpawned(ctx context.Context, s *session.Session) error {
	select {
	case <-s.Exited():
	case <-ctx.Done():
		// Ctrl-C reached the whole foreground group; give the target its chance to finish.
		select {
		case <-s.Exited():
		case <-time.After(5 * time.Second):
			s.Kill(2 * time.Second)
		}
	}
	if code := s.ExitCode(); code != 0 {
		return exitStatus{code}
	}
	return nil
}

func writeDumpText(w io.Writer, d *session.Dump) error {
	how := "read without stopping the target"
	if d.Read.Method == "ptrace-stopped" {
		how = fmt.Sprintf("read with the target stopped for %.0f µs", d.Read.StoppedUS)
	}
	fmt.Fprintf(w, "Process %d: Python %s (%s), %d threads, %s in %.0f µs\n",
		d.Pid, d.Python.Version, d.Python.Binary, len(d.Threads), how, d.Read.DurationUS)
	if d.Read.TornRetries > 0 || d.Read.Torn > 0 {
		fmt.Fprintf(w, "  torn reads: %d retried, %d threads still inconsistent\n", d.Read.TornRetries, d.Read.Torn)
	}
	writeNativeAccount(w, d.Native)
	for _, t := range d.Threads {
		fmt.Fprintln(w)
		name := fmt.Sprintf("%q", t.Name)
		if t.Name == "" {
			name = "(no threading name)"
			if t.Tid == d.Pid {
				name = "(main thread, no threading name)"
			}
		}
		tid := "?"
		if t.Tid > 0 {
			tid = fmt.Sprint(t.Tid)
		}
		var tags []string
		if t.HoldsGIL {
			tags = append(tags, "[holds GIL]")
		}
		if t.State != "" {
			tags = append(tags, t.State)
		}
		fmt.Fprintf(w, "Thread %s %s (thread_id 0x%x) %s\n", tid, name, t.ThreadID, strings.Join(tags, " "))
		if !t.Consistent {
			fmt.Fprintf(w, "  (inconsistent read: %s)\n", t.Error)
		}
		writeNativeThreadNote(w, t.Native)
		if len(t.Frames) == 0 {
			fmt.Fprintln(w, "  (no Python frames)")
			continue
		}
		for i := len(t.Frames) - 1; i >= 0; i-- {
			fr := t.Frames[i]
			if fr.Kind == session.KindNative || fr.Kind == session.KindMarker {
				writeNativeFrame(w, fr)
				continue
			}
			fmt.Fprintf(w, "  File \"%s\", line %d, in %s\n", fr.File, fr.Line, fr.Function)
			for _, l := range fr.Locals {
				v := l.Value
				if v == "" {
					v = "<" + l.Type + ">"
				} else {
					v += " (" + l.Type + ")"
				}
				fmt.Fprintf(w, "      %s = %s\n", l.Name, v)
			}
		}
	}
	return nil
}

// runDumpTasks prints the asyncio task tree (dump --tasks).
func runDumpTasks(ctx context.Context, s *session.Session, g *globals, f *dumpFlags, format string) error {
	d, err := s.Tasks(session.DumpOptions{Locals: f.locals, Lock: f.lock})
	if err != nil {
		if s.Spawned() {
			s.Kill(2 * time.Second)
		}
		return err
	}
	return finishDump(ctx, s, g, f, format, d, func(w io.Writer) error { return writeTasksText(w, d) })
}

// writeTasksText prints the task tree like python -m asyncio pstree: a task,
// its coroutine chain (outermost first), then the tasks it awaits, below it.
// Roots are tasks nobody awaits; cycles are printed once and reported.
func writeTasksText(w io.Writer, d *session.TasksDump) error {
	if !d.Supported {
		fmt.Fprintf(w, "Process %d: Python %s (%s): %s\n", d.Pid, d.Python.Version, d.Python.Binary, d.Note)
	} else {
		how := "read without stopping the target"
		if d.Read.Method == "ptrace-stopped" {
			how = fmt.Sprintf("read with the target stopped for %.0f µs", d.Read.StoppedUS)
		}
		fmt.Fprintf(w, "Process %d: Python %s (%s), %d asyncio tasks, %s in %.0f µs\n",
			d.Pid, d.Python.Version, d.Python.Binary, len(d.Tasks), how, d.Read.DurationUS)
		if d.Read.Torn > 0 {
			fmt.Fprintf(w, "  torn reads: %d (tasks or lists changed while read; the tree may be incomplete)\n", d.Read.Torn)
		}
		if len(d.Limits) > 0 {
			fmt.Fprintf(w, "  read from %s; not reconstructed exactly:\n", d.Section)
			for _, l := range d.Limits {
				fmt.Fprintf(w, "    - %s\n", l)
			}
		}
		for _, e := range d.ReadErrors {
			fmt.Fprintf(w, "  read error: %s\n", e)
		}
		byID := map[uint64]*session.TaskDump{}
		for i := range d.Tasks {
			byID[d.Tasks[i].ID] = &d.Tasks[i]
		}
		for _, th := range d.Threads {
			if !th.RunningLoop && th.Tasks == 0 {
				continue
			}
			run := "no running task"
			if t, ok := byID[th.RunningTask]; ok {
				run = fmt.Sprintf("running task %q", t.Name)
			} else if th.RunningTask != 0 {
				run = fmt.Sprintf("running task 0x%x", th.RunningTask)
			}
			loop := "no running loop"
			if th.RunningLoop {
				loop = "loop running"
			}
			ntasks := fmt.Sprintf("%d tasks", th.Tasks)
			if th.Tasks < 0 {
				if !th.RunningLoop {
					continue
				}
				ntasks = "tasks not recorded per thread"
			}
			fmt.Fprintf(w, "Thread %d (thread_id 0x%x): %s, %s, %s\n", th.Tid, th.ThreadID, loop, run, ntasks)
		}
		if d.Read.ExitedTasks > 0 {
			fmt.Fprintf(w, "Tasks of exited threads: %d\n", d.Read.ExitedTasks)
		}
		for _, c := range d.Cycles {
			var names []string
			for _, id := range c {
				if t, ok := byID[id]; ok {
					names = append(names, t.Name)
				} else {
					names = append(names, fmt.Sprintf("0x%x", id))
				}
			}
			fmt.Fprintf(w, "Await cycle: %s → %s\n", strings.Join(names, " → "), names[0])
		}
		children := map[uint64][]uint64{}
		var roots []uint64
		for _, t := range d.Tasks {
			known := 0
			for _, a := range t.AwaitedBy {
				children[a] = append(children[a], t.ID)
				if _, ok := byID[a]; ok {
					known++
				}
			}
			if known == 0 {
				roots = append(roots, t.ID)
			}
		}
		printed := map[uint64]bool{}
		var node func(id uint64, prefix string, last bool, path map[uint64]bool)
		node = func(id uint64, prefix string, last bool, path map[uint64]bool) {
			branch, cont := "├── ", "│   "
			if last {
				branch, cont = "└── ", "    "
			}
			t := byID[id]
			if path[id] {
				fmt.Fprintf(w, "%s%s(T) %s  [await cycle: already above]\n", prefix, branch, t.Name)
				return
			}
			var tags []string
			if t.Running {
				tags = append(tags, "[running]")
			}
			if t.Error != "" {
				tags = append(tags, "[torn: "+t.Error+"]")
			}
			fmt.Fprintf(w, "%s%s(T) %s %s\n", prefix, branch, t.Name, strings.Join(tags, " "))
			printed[id] = true
			kids := children[id]
			for i, c := range t.Coroutines {
				mark := "↳"
				if i == 0 {
					mark = "•"
				}
				fmt.Fprintf(w, "%s%s%s %s %s:%d\n", prefix+cont, strings.Repeat("  ", i), mark, c.Function, c.File, c.Line)
			}
			if t.Awaiting != "" {
				fmt.Fprintf(w, "%s%s  awaiting a %s\n", prefix+cont, strings.Repeat("  ", max(len(t.Coroutines)-1, 0)), t.Awaiting)
			}
			path[id] = true
			for i, k := range kids {
				if _, ok := byID[k]; ok {
					node(k, prefix+cont, i == len(kids)-1, path)
				}
			}
			delete(path, id)
		}
		for _, r := range roots {
			node(r, "", true, map[uint64]bool{}) // every root gets └──, as in pstree
		}
		// Tasks only reachable through a cycle have no root: print them too.
		for _, t := range d.Tasks {
			if !printed[t.ID] {
				node(t.ID, "", true, map[uint64]bool{})
			}
		}
	}
	if d.Stacks != nil {
		fmt.Fprintln(w)
		return writeDumpText(w, d.Stacks)
	}
	return nil
}
