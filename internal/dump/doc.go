// Package dump is the dump engine: every thread's Python stack of a target
// at one moment (Run), or its asyncio task tree followed by the stacks
// (RunTasks), with the read's own account, and the text renderers of both.
//
// Price: introspection. By default nothing is stopped: each thread's stack
// is read from the target's memory while it runs (process_vm_readv through
// internal/pyframes), validated and re-read when it changed underneath, and
// reported as consistent or not. With Lock the threads are stopped
// (PTRACE_SEIZE + INTERRUPT) for the read and resumed at once; the stopped
// time is reported. A process already stopped by job control (SIGSTOP,
// SIGTSTP) is read as it stands and left stopped (ReadInfo.AlreadyStopped).
// A stack deeper than pyobs walks (pyframes.MaxDepth) is its innermost
// frames, marked truncated, not a torn read. With Native each stopped thread's registers and stack
// copy are unwound (internal/unwind) and glued to its Python frames
// (internal/mixed).
//
// Truth read: the interpreter's thread states, frames and code objects;
// /proc for thread ids and scheduler states; with Native, registers and
// stack memory. The GIL is read before the stacks and states and again
// after them (with Lock, while still stopped): a thread is marked as its
// holder only when both readings name it with no switch between, so its
// state is of a time it held the GIL; otherwise nobody is marked
// (ReadInfo.GIL says whether the GIL was free or changed hands).
//
// On a set of processes (RunSet: several pids, the descendants living at
// the dump's instant, a cgroup's processes, every Python process) each
// process is read in turn as above, through a session of its own; with
// Lock one process is stopped at a time. A process that is not Python, may
// not be read or exited is refused with its reason, not an error.
//
// Cannot see: anything between two reads (a dump is one moment); a
// holder that dropped the GIL and took it back between the two GIL
// readings with no other thread taking it (≤3.11: with one, too); native
// frames without Native; kernel frames; threads that have no Python thread
// state. In a set, the processes are read one after the other (one moment
// each, not one for all), and children re-parented away from the set's
// processes before the dump are not found (a cgroup finds them).
package dump
