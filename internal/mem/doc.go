// Package mem is the memory engine: where a running Python process's
// memory goes over a window — the allocation sites that grew, by bytes and
// count, with their Python stacks — beside the process's RSS and PSS.
// Engine auto runs tracemalloc on 3.14+ (far cheaper than the probes; the
// probes when it is refused) and probe before 3.14 (Result.EngineReason
// says which and why).
//
// Engine probe (every version, no cooperation): eBPF uprobes for the one
// process (internal/mem/probebpf) on the allocator the build routes the
// PyObject_* and PyMem_* families through — pymalloc's own functions,
// reached through the allocator hooks, where the symbol table names them;
// else the exported entry points (.dynsym of a stripped binary), plus
// libc's free when the build inlined pymalloc into them. An allocation of
// s bytes is kept with probability s/SampleBytes and its Python stack
// walked in the kernel at the call; kept blocks live in a kernel map until
// freed; at the end the map is read, grouped by stack and scaled back
// (bytes: size/probability; count: 1/probability). The curve is the
// kernel's running estimate of live kept bytes, read on the curve's period
// beside RSS/PSS.
//
// With --native (probe), a kept call also copies the calling thread's
// registers and up to 16 KiB of its user stack in the kernel (untracked
// calls copy nothing); pyobs unwinds each copy as it arrives with the CFI
// of the files the target maps (internal/unwind: pyenv's libpython has no
// frame pointers; an extension needs none), names the frames from their
// symbol tables, and merges (internal/mixed, by counting: the kernel's walk
// carries no C-stack links): each _PyEval_EvalFrameDefault frame becomes
// the run of Python frames it executes, so a C extension's function lies
// under the Python line that called it. Sites are then grouped by Python
// and native stack together. An unwind that stops before the outermost
// frame (the copy ended, a frame without CFI) keeps a marker saying why in
// place of the callers it lost; counts that disagree are shown apart after
// a marker — never a guessed stack.
//
// Price (probe): traps. Every allocator call pays an entry and a return
// trap, every free one, sampled or not; a kept call adds a kernel stack
// walk (and with --native a copy of up to 16 KiB of stack into a ring:
// 4–9 KiB measured on the test's targets, unwound in pyobs, not in the
// target). ~4 µs of the target's CPU per trap here (loaded 2-vCPU
// Firecracker VM, 2026-12-01, BENCHMARKS.md): a loop that only allocates
// (11 traps per iteration) ran 250–590x slower; the sampling rate barely
// changes that — the traps dominate. Nothing runs in the target; the
// kernel removes the probes when pyobs exits, SIGKILL included.
//
// Truth read (probe): the allocator's arguments and return values at each
// call, the pointer of each free, the thread's frames in the target's
// memory at the call.
//
// Cannot see (probe): allocations before the window (not in the map: their
// frees are ignored); memory from malloc directly or PyMem_Raw* — an
// extension's plain malloc is not probed: libc's malloc serves every
// library of the process (and pymalloc's own large blocks, which would be
// counted twice), so probing it would make every malloc of the process pay
// two traps; an extension that allocates through PyMem_Malloc or
// PyObject_Malloc is seen, with --native its C frames too; calls a
// link-time optimised build inlined (Debian's and sid's binaries inline
// pymalloc into its callers: small blocks' allocations and frees made
// inside the binary reach no probe — the report says so); a target whose
// allocator was switched (PYTHONMALLOC=malloc) on builds probed at
// pymalloc's functions; native stacks without --native, and with it native
// frames beyond the 16 KiB copied (marked) or without CFI (marked), static
// functions of a binary stripped to .dynsym (unnamed: "[unknown]
// (lib+0xoff)"), and a stripped binary's unnamed eval loop (its Python
// frames are then not glued in: a mismatch, shown); bounded maps (drops
// counted). The kernel fires uprobes for the memory of the thread they
// were opened on, and only while it lives: they are opened on the main
// thread (on a live one when the main thread has exited: a zombie is
// refused); when that thread ends during the window (checked every 20
// ms) they are opened again on a live one, said in the report with the
// most time they may have missed (probes_moved), and only when no thread
// can take them does the window end there (probes_ended).
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
// Price (tracemalloc): cooperation plus tracing. Two safe-point script runs (each pauses
// the target while it runs; the second one compares the snapshots: tens of
// ms for thousands of sites). While tracemalloc is on every allocation of
// the target records its stack: allocation-heavy code slows down a lot —
// measured here (2-vCPU VM under load, 2026-12-01, interleaved in-process
// A/B of a loop that only allocates): 9–12x with 16 frames, 5–7x with
// --frames 1, on sid 3.14 and 3.15; code that allocates less pays less —
// and the traces themselves take memory.
//
// Truth read (tracemalloc): tracemalloc's traces (every Python allocator call — the
// PyMem_*, PyObject_* and raw domains — with its Python stack, up to the
// frame limit); /proc/PID/smaps_rollup at both ends of the window.
//
// Cannot see (tracemalloc): allocations made before the window (tracemalloc starts with
// it: "growth" is what was allocated in the window and still lives at its
// end); memory C code allocates with malloc directly (numpy's data is
// counted only through its own tracemalloc hooks); native stacks; frames
// beyond the limit (the outermost are cut). Needs a thread that comes back
// to the eval loop (see remoteexec).
//
// -p PID exec'ing (probe engine): the window ends within 20 ms of the
// exec (session.Execed); the RSS/PSS end is the last reading before it,
// stacks are named through session.GuardCode (none from the new program),
// and the result says what the target became (exit status 3). The
// allocations counted between the exec and that look are the new
// program's if it is the same binary.
package mem
