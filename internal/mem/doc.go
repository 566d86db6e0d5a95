// Package mem is the memory engine: where a running Python process's
// memory goes over a window — the allocation sites that grew, by bytes and
// count, with their Python stacks — beside the process's RSS and PSS.
//
// Engine tracemalloc (CPython 3.14+): through internal/remoteexec (PEP 768)
// pyobs starts tracemalloc in the target (unless it is already on: then it
// is left on, with its own frame limit), takes a snapshot, waits the
// window, takes a second snapshot, stops tracemalloc again, and compares
// the two in the target; only the result (top sites, a few KB of JSON)
// comes back. A watchdog thread started in the target holds the read end of
// a pipe whose write end pyobs holds: when pyobs dies (SIGKILL included)
// the pipe hangs up and the watchdog stops tracemalloc and drops the
// snapshot; without that signal it does so anyway at the window's end plus
// a grace. Nothing pyobs starts outlives it. The watchdog also samples
// tracemalloc's traced total on the growth curve's period while pyobs reads
// smaps_rollup on the same period; both carry CLOCK_MONOTONIC times.
//
// Price: cooperation plus tracing. Two safe-point script runs (each pauses
// the target while it runs; the second one compares the snapshots: tens of
// ms for thousands of sites). While tracemalloc is on every allocation of
// the target records its stack: allocation-heavy code slows down a lot —
// measured here (2-vCPU VM under load, 2026-12-01, interleaved in-process
// A/B of a loop that only allocates): 9–12x with 16 frames, 5–7x with
// --frames 1, on sid 3.14 and 3.15; code that allocates less pays less —
// and the traces themselves take memory.
//
// Truth read: tracemalloc's traces (every Python allocator call — the
// PyMem_*, PyObject_* and raw domains — with its Python stack, up to the
// frame limit); /proc/PID/smaps_rollup at both ends of the window.
//
// Cannot see: allocations made before the window (tracemalloc starts with
// it: "growth" is what was allocated in the window and still lives at its
// end); memory C code allocates with malloc directly (numpy's data is
// counted only through its own tracemalloc hooks); native stacks; frames
// beyond the limit (the outermost are cut). Needs a thread that comes back
// to the eval loop (see remoteexec). The probe engine (uprobes on the
// allocators, every version) is not built yet.
package mem
