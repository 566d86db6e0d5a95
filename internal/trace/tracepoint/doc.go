// Package tracepoint is the in-kernel syscall engine of `pyobs trace`: two
// eBPF programs on the raw tracepoints sys_enter and sys_exit (attached by
// name: no tracefs, no kprobes) filtered to a set of processes
// (internal/bpf/include/procset.h, driven by internal/procset: one thread
// group, several, the children a member forks from their fork on, a
// cgroup's). Config.PerPid keeps each member's own account (calls, errors,
// time, latency histogram; ReadPids); Config.Held counts a command held
// before its exec from the exec on (the holder's own calls are not its).
// Its walk is loaded before the interpreter is up (Config.Late): with the
// layout read from the command's files and the process's addresses
// written later (syscallslate, SetAddrs), or, when the files name no
// interpreter, with nothing and the whole walk written later (syscallsheld,
// built with PYWALK_CFG_MUTABLE: the verifier checks every version's
// branches, a longer load; SetWalk). Until then the calls are counted and
// their events carry no stack.
//
// What truth it reads: the kernel's own syscall entry and exit of every
// thread of the target (threads started later included: the filter is the
// tgid). Per syscall number it keeps, in the kernel, calls, errors, total
// and max time (per CPU), a log-linear latency histogram (the buckets of
// internal/trace.Hist) and counts per errno; only those summaries cross to
// user space, read when the trace ends. Each call slower than the threshold
// or failing also sends one event through a ring buffer, with the thread's
// whole Python stack walked at sys_exit by internal/bpf/include/pywalk.h
// (Config.Walk: the layout of internal/kwalk) while the thread is still in
// the kernel — so the path is the one that made the call, not a guess: the
// thread cannot have run Python since its sys_enter, and only at the exit
// is it known whether the call was slow or failed. The event carries the
// stack's hash; each distinct stack is sent once through a second ring
// (pystacks, with an LRU of hashes sent), for user space to symbolize.
// Without the walk (a kernel that refuses bpf_loop, or Config.Walk nil),
// the program reads the innermost frame alone (frame, code object,
// instruction pointer) and user space resolves it (Resolver).
//
// Price: no stops. About 0.5 µs of kernel time per syscall of the target on
// the VM it was measured on (the programs themselves ~0.16 µs: an in-place
// per-thread entry at enter; per-CPU counters and a histogram bucket at
// exit); every other process pays the syscall-tracepoint path and a tgid
// comparison, ~0.05–0.15 µs per syscall, while the programs are attached
// (BenchmarkGetpid, BENCHMARKS.md). The filter is one hash lookup of the
// caller's tgid in the set at sys_enter (sys_exit trusts the thread's
// entry, checked against its tgid). Measured 2026-12-01 on a 0.3 µs
// os.write loop (CPU time of the loop, thread_time): +0.6 µs per call
// with a set's per-process accounts, +0.3 µs with programs that return at
// once (the raw syscall tracepoints themselves, in this VM). The walk costs only the slow or failing
// calls: 200,000 failing os.stat calls at 4 frames (3.12, on this 2-core VM
// at load average 12–14, 2026-12-01, BPF run-time stats): sys_exit's run
// time 0.40–0.98 s, ~2–5 µs per walked call, against 0.14–0.18 s for the
// one-frame capture. User space then does a hash lookup per event instead
// of resolving a frame: at ~60,000 events/s the walk lost no event where
// the one-frame capture's reader lost two thirds of them (ring full).
//
// Cannot see: calls already in progress when it attached (their exit has no
// enter: not counted), arguments (the ptrace engine decodes them), the
// Python site of a thread whose thread state it does not know yet (a new
// thread until the next refresh, unless the walker finds it through its
// TLS: user space then reads the live stack after the fact and labels it
// late, never attributes it silently); without the walk, 3.10's frame
// objects (sites there are late reads). Walks that fault (a page of the
// stack not present), fail a check (a torn chain) or go deeper than 128
// frames (kept, marked truncated) are counted, never guessed. Bounded maps: events that find the
// ring buffer full, and histogram or errno entries that find their map
// full, are counted as drops; call counts and totals are never dropped.
//
// syscalls_bpfel.o and its Go bindings are generated from syscalls.bpf.c by
// bpf2go (`make generate`) and committed, so `go build` needs no clang; the
// programs load and attach through internal/bpfload.
package tracepoint
