// Package tracepoint is the in-kernel syscall engine of `pyobs trace`: two
// eBPF programs on the raw tracepoints sys_enter and sys_exit (attached by
// name: no tracefs, no kprobes) filtered to one thread group.
//
// What truth it reads: the kernel's own syscall entry and exit of every
// thread of the target (threads started later included: the filter is the
// tgid). Per syscall number it keeps, in the kernel, calls, errors, total
// and max time (per CPU), a log-linear latency histogram (the buckets of
// internal/trace.Hist) and counts per errno; only those summaries cross to
// user space, read when the trace ends. Each call slower than the threshold
// or failing also sends one event through a ring buffer, with the thread's
// innermost Python frame (frame, code object, instruction pointer) read by
// the program while the thread is still in the kernel — so the site is the
// line that made the call, not a guess: the thread cannot have run Python
// since. User space resolves the code object to a name, file and line.
//
// Price: no stops. About 0.5 µs of kernel time per syscall of the target on
// the VM it was measured on (the programs themselves ~0.16 µs: an in-place
// per-thread entry at enter; per-CPU counters and a histogram bucket at
// exit); every other process pays the syscall-tracepoint path and a tgid
// comparison, ~0.05–0.15 µs per syscall, while the programs are attached
// (BenchmarkGetpid, BENCHMARKS.md).
//
// Cannot see: calls already in progress when it attached (their exit has no
// enter: not counted), arguments (the ptrace engine decodes them), the
// Python site of a thread whose thread state it does not know yet (a new
// thread until the next refresh: user space then reads the live stack after
// the fact and labels it late, never attributes it silently), 3.10's frame
// objects (sites there are late reads). Bounded maps: events that find the
// ring buffer full, and histogram or errno entries that find their map
// full, are counted as drops; call counts and totals are never dropped.
//
// syscalls_bpfel.o and its Go bindings are generated from syscalls.bpf.c by
// bpf2go (`make generate`) and committed, so `go build` needs no clang; the
// programs load and attach through internal/bpfload.
package tracepoint
