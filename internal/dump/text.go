package dump

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// WriteText prints a dump as the text report: a header with the read's
// account, then each thread, outermost frame first (like a traceback).
func WriteText(w io.Writer, d *Dump) error {
	how := readHow(d.Read)
	fmt.Fprintf(w, "Process %d: Python %s (%s), %d threads, %s in %.0f µs\n",
		d.Pid, d.Python.Version, d.Python.Binary, len(d.Threads), how, d.Read.DurationUS)
	writeThreads(w, d)
	return nil
}

// readHow says how a dump was read, for its header.
func readHow(r ReadInfo) string {
	if r.Method == "ptrace-stopped" && r.AlreadyStopped {
		return "read while the target was already stopped (job control; left stopped)"
	}
	if r.Method == "ptrace-stopped" {
		return fmt.Sprintf("read with the target stopped for %.0f µs", r.StoppedUS)
	}
	return "read without stopping the target"
}

// writeThreads prints what follows a dump's header: the read's account
// and every thread.
func writeThreads(w io.Writer, d *Dump) {
	if d.Read.TornRetries > 0 || d.Read.Torn > 0 {
		fmt.Fprintf(w, "  torn reads: %d retried, %d threads still inconsistent\n", d.Read.TornRetries, d.Read.Torn)
	}
	if d.Read.GIL == "changed" {
		fmt.Fprintln(w, "  GIL: taken, dropped or passed on during the read: no thread is marked as its holder")
	}
	writeNativeAccount(w, d.Native)
	var line []byte
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
		if t.NoThread {
			fmt.Fprintln(w, "  (no thread of this process is this thread state's: left by a fork that bypassed Python's own, or its thread exited as it was read)")
		}
		writeNativeThreadNote(w, t.Native)
		if t.Truncated {
			fmt.Fprintf(w, "  (truncated: a stack deeper than %d frames; its %d innermost read, the outer ones not)\n", pyframes.MaxDepth, pythonFrames(t.Frames))
		}
		if len(t.Frames) == 0 {
			fmt.Fprintln(w, "  (no Python frames)")
			continue
		}
		in := int64(-1) // the interpreter of the frames printed last (a stack spanning several)
		for i := len(t.Frames) - 1; i >= 0; i-- {
			fr := t.Frames[i]
			if fr.Kind == KindNative || fr.Kind == KindMarker {
				writeNativeFrame(w, fr)
				continue
			}
			if fr.Interp != nil && *fr.Interp != in {
				in = *fr.Interp
				if in == 0 {
					fmt.Fprintln(w, "  In interpreter 0 (main):")
				} else {
					fmt.Fprintf(w, "  In interpreter %d:\n", in)
				}
			}
			// Appended, not Fprintf'd: a 50-thread dump prints ~1,000
			// of these lines, and fmt took ~0.5 ms of its ~15.
			line = append(line[:0], "  File \""...)
			line = append(line, fr.File...)
			line = append(line, "\", line "...)
			line = strconv.AppendInt(line, int64(fr.Line), 10)
			line = append(line, ", in "...)
			line = append(line, fr.Function...)
			line = append(line, '\n')
			_, _ = w.Write(line)
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
}

// WriteTasksText prints the task tree like python -m asyncio pstree: a task,
// its coroutine chain (outermost first), then the tasks it awaits, below it.
// Roots are tasks nobody awaits; cycles are printed once and reported.
func WriteTasksText(w io.Writer, d *TasksDump) error {
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
		byID := map[uint64]*TaskDump{}
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
		return WriteText(w, d.Stacks)
	}
	return nil
}

// writeNativeAccount prints dump --native's unwind and merge counts.
func writeNativeAccount(w io.Writer, n *NativeInfo) {
	if n == nil {
		return
	}
	fmt.Fprintf(w, "  native stacks (%d bytes copied per thread): %d unwound fully, %d truncated, %d failed; %d merge mismatches",
		n.StackSize, n.Full, n.Truncated, n.Failed, n.Mismatch)
	if n.NoPython > 0 {
		fmt.Fprintf(w, "; %d interpreter frames without Python frames (stopped entering or leaving the eval loop)", n.NoPython)
	}
	if n.PythonUnread > 0 {
		fmt.Fprintf(w, "; %d threads whose Python stack could not be read (native stack alone)", n.PythonUnread)
	}
	fmt.Fprintln(w)
}

// writeNativeThreadNote says why a thread has no native frames, or shows
// its native stack apart when it did not glue.
func writeNativeThreadNote(w io.Writer, n *ThreadNative) {
	switch {
	case n == nil:
	case n.Merge == "mismatch":
		fmt.Fprintln(w, "  [merge mismatch: the native and Python stacks, both read while the thread was stopped, do not glue (a pyobs bug); shown apart]")
		fmt.Fprintf(w, "  native stack (%s unwind), outermost first:\n", n.Unwind)
		for i := len(n.NativeFrames) - 1; i >= 0; i-- {
			writeNativeFrame(w, n.NativeFrames[i])
		}
		fmt.Fprintln(w, "  Python stack:")
	case n.Merge == "python-unread":
		fmt.Fprintf(w, "  native stack (%s unwind), outermost first (the Python stack could not be read: not merged):\n", n.Unwind)
		for i := len(n.NativeFrames) - 1; i >= 0; i-- {
			writeNativeFrame(w, n.NativeFrames[i])
		}
	case n.Merge == "none":
		fmt.Fprintf(w, "  (no native frames: %s)\n", n.Error)
	case n.Unwind == "failed":
		fmt.Fprintf(w, "  (native unwind failed at the outermost native frame shown: %s)\n", n.Error)
	}
}

// writeNativeFrame prints a native frame or a marker of dump --native.
func writeNativeFrame(w io.Writer, f FrameDump) {
	if f.Kind == KindMarker {
		fmt.Fprintf(w, "  %s\n", f.Function)
		return
	}
	where := fmt.Sprintf("0x%x", f.Offset)
	if f.File != "" {
		where = fmt.Sprintf("%s+0x%x", filepath.Base(f.File), f.Offset)
	}
	fmt.Fprintf(w, "  (native) %s  %s\n", f.Function, where)
}

// pythonFrames counts the Python frames of a thread's frames (native
// ones glued in by --native excluded).
func pythonFrames(fs []FrameDump) int {
	n := 0
	for _, f := range fs {
		if f.Kind != KindNative && f.Kind != KindMarker {
			n++
		}
	}
	return n
}
