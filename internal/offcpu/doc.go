// Package offcpu measures where a Python process's threads wait: every
// off-CPU interval of every thread, weighted in microseconds, attributed to
// the Python stack the thread was blocked in and to a wait class (lock, GIL,
// sleep, pipe/read, network/poll, disk I/O, run-queue, other).
//
// Truth it reads: the kernel's own context-switch records (perf_event_open,
// a software dummy event per thread with context_switch and sample_id_all,
// CLOCK_MONOTONIC times; PERF_RECORD_SWITCH with the switch-out and
// preempted flags). Interval lengths are exact to the kernel's clock. For a
// thread still off-CPU when the rings are drained (every ~1 ms), its Python
// stack is read at once — it cannot change while the thread is off CPU, and
// the read is kept only if the thread's ring stayed quiet during it — and so
// is its wait reason: /proc/PID/task/TID/{stat,syscall,wchan}, the futex
// address (inside the interpreter's GIL state → GIL, else lock) and, for a
// read, what the fd is (/proc/PID/fd/N → pipe).
//
// Price: one ring write per context switch in the kernel (no wake-ups: the
// observer polls), plus per wait longer than the drain period one stack read
// and three small procfs reads. On context-switch-heavy targets the ring
// writes are the cost; the footer reports the switch rate.
//
// Cannot see: waits that began and ended between two drains (< ~1 ms) —
// their count and total time are reported, folded under
// [short waits: not read], never attributed to a stack nobody looked at;
// kernel and native stacks; who woke the thread (--waker needs sched_wakeup);
// the on-CPU stacks (--wall folds on-CPU time under [on-CPU] only: use
// `pyobs record` for where CPU goes). The eBPF engine (sched_switch with
// stacks captured in the kernel at switch-out, so short waits get stacks
// too) is the next step; this is the perf fallback engine.
package offcpu
