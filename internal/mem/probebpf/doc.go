// Package probebpf is the kernel half of pyobs mem's probe engine: uprobes
// on the interpreter's allocator, set for one process through perf events
// (the uprobe PMU: no tracefs), and the maps they fill. The layer probed is
// pymalloc's own _PyObject_Malloc/_Calloc/_Realloc/_Free (the targets of
// the allocator hooks every PyObject_* and PyMem_* call goes through; their
// first argument is the hook's context) where the symbol table names them,
// else the exported PyObject_* and PyMem_* entry points (.dynsym), plus
// libc's free when the build inlined pymalloc into those (LTO).
//
// Truth it reads: each allocator call of the target — its size at the
// entry, its pointer at the return (a uretprobe), the pointer a free
// gives back — and, for the calls the sampling keeps (probability
// size/SampleBytes), the calling thread's Python stack walked in the kernel
// at the call (internal/bpf/include/pywalk.h, the walk the sampling walker
// uses). Live tracked allocations are kept as ptr -> {size, estimate,
// stack hash, time, native copy id}; each new stack goes to user space
// once, through a ring buffer. With Config.NativeBytes (mem --native) a
// kept call also sends its registers and up to 16 KiB of its user stack,
// copied from the stack pointer up in 1 KiB pieces and then halves down to
// 64 bytes where the stack's mapping ends, through a second ring
// (natstacks) under an id its live entry keeps: user space unwinds it.
//
// Price: a uprobe is a trap — every allocator call of the target pays an
// entry trap and a return trap, every free an entry trap, sampled or not
// (see BENCHMARKS.md for the slowdown measured here); a kept call adds a
// stack walk and two hash updates, with NativeBytes a stack copy of up to
// 16 KiB (the ring is 8 MiB: copies that find it full are counted lost). The kernel removes the uprobes with
// their perf events when pyobs exits, SIGKILL included.
//
// Bounds: the live map has a fixed size; allocations that do not fit are
// counted with their estimated bytes, never grown.
//
// Cannot see: allocations made before the window (they are not in the live
// map: their frees are ignored); calls the build inlined into their callers
// (link-time optimised builds may inline an entry point: those calls never
// reach the probe); memory taken with malloc directly or through the
// PyMem_Raw* family (an extension's plain malloc included); native stacks
// without NativeBytes, and with it frames beyond the copy. x86_64 only (registers read by their
// x86 names).
package probebpf
