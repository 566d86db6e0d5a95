// Package dump is the dump engine: every thread's Python stack of a target
// at one moment (Run), or its asyncio task tree followed by the stacks
// (RunTasks), with the read's own account, and the text renderers of both.
//
// Price: introspection. By default nothing is stopped: each thread's stack
// is read from the target's memory while it runs (process_vm_readv through
// internal/pyframes), validated and re-read when it changed underneath, and
// reported as consistent or not. With Lock the threads are stopped
// (PTRACE_SEIZE + INTERRUPT) for the read and resumed at once; the stopped
// time is reported. With Native each stopped thread's registers and stack
// copy are unwound (internal/unwind) and glued to its Python frames
// (internal/mixed).
//
// Truth read: the interpreter's thread states, frames and code objects;
// /proc for thread ids and scheduler states; with Native, registers and
// stack memory.
//
// Cannot see: anything between two reads (a dump is one moment); native
// frames without Native; kernel frames; threads that have no Python thread
// state.
package dump
