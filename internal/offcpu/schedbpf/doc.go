// Package schedbpf is the kernel half of pyobs offcpu's eBPF engine: it
// loads one program on the sched_switch tracepoint (tp_btf, else raw_tp:
// both attach by name, no tracefs, no kprobes) and reads back its maps.
//
// Truth it reads: the scheduler's own switch events for one process
// (filtered by tgid in the kernel). At a target thread's switch-out (the
// thread is current there) it stamps CLOCK_MONOTONIC, the kernel stack id
// (bpf_get_stackid), prev_state (preempted vs blocked) and, from the saved
// user registers (bpf_task_pt_regs), the syscall number, whether its first
// argument points into the interpreter's GIL state, and the user
// instruction pointer; at its switch-in it adds the interval to an
// aggregate keyed by (tid, kernel stack, user IP, hints, Python stack id).
// Only sums cross to user space; per-thread on/off/run-queue totals are
// kept in the kernel too. With Config.Waker, a second program on
// sched_waking (in the waker's context) notes who woke a target thread, and
// the switch-in also adds the wait to an aggregate keyed by the wait and
// its waker (tgid, tid, comm, kernel stack).
//
// Price: the program runs on every context switch of the machine (a tgid
// compare for other processes); a target switch costs a few hash updates
// and a kernel stack walk — skipped (the thread's last id reused, counted)
// when it blocks again in the same syscall on the same first argument
// within ReuseNS: the walk dominates on switch-heavy targets. Counters
// report the machine's switch rate.
//
// Sets (Config.Set): the programs filter by procset.h's members instead of
// one tgid — a hash look-up per switch of any task (the switched-out one
// by procset_current, which also lets a cgroup's process join; the
// switched-in one and a wakee by the procs map; the waker may be any
// process, as for one target) — and procset.h's fork, exec and exit
// programs grow and shrink the set in the kernel; Tracer.Set keeps the
// account. The walk takes a member's own interpreter addresses from the
// pyaddrs map (Tracer.PyAddrs) where user space put them.
//
// Bounds: every map has a fixed size. What does not fit is counted
// (start/aggregate/thread map full, stack id errors), never grown; user
// space deletes the entries of exited threads.
//
// Cannot see: Python frames (user space reads them while a thread is off
// CPU and hands the kernel a Python stack id to key the wait under); user
// stacks beyond the syscall site (CPython here has no frame pointers, so a
// frame-pointer walk of the user stack would be garbage past its start);
// the waker's user stack (Config.Waker: a program on sched_waking notes
// the waker's tid, comm and kernel stack only). x86_64 only (the saved
// registers are read by their x86 names).
//
// Built by bpf2go (`make generate`; kernel types from
// internal/bpf/include/pyobs.h), loaded and attached through
// internal/bpfload.
package schedbpf
