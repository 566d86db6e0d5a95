// Package diagnose is `pyobs diagnose`: the observation procedure end to
// end, composed only of the engines' Run functions. Phase 1 counts (stat:
// CPU against wall, run-queue wait, switches, cgroup throttling and PSI,
// memory, threads); the decision reads those numbers — throttled: the
// cgroup finding and stop; queued: capacity and stop; on CPU: phase 2;
// blocking: phase 3; both: both. Phase 2 samples (record --mode cpu);
// phase 3 records waits (offcpu --waker with the idle waits of IdleWaits
// excluded); phase 4 traces narrowly (trace -e with the calls of the top
// wait's class) only when phase 3 names a pipe, network or disk wait, with
// its hypothesis written down; phase 5 dumps the Python threads (and the
// asyncio tasks when there are some). The report lists the findings by
// weight, each with its number and the command that reproduces it, what
// was ruled out with the evidence, and what each phase cost.
//
// Budget: the whole run fits Options.Duration. Counting takes a tenth of
// it (1..5 s), the dump keeps 0.5 s, and the rest is split before the
// phases run: on-cpu all to phase 2; off-cpu 70 % phase 3, 30 % phase 4;
// mixed 40 % phase 3, 20 % phase 4, then phase 2 gets the rest (40 %, and
// the trace's share when no trace runs: phase 3 runs first because only
// it decides whether phase 4 runs). Time a phase does not use is not
// spent. The plan is in the report. When ctx ends (Ctrl-C) the
// phases done are reported.
//
// Price: the sum of the phases' prices, each stated in the report with
// pyobs's own CPU during it (clock.ObserverCPU deltas):
//   - count: counting — /proc and /sys reads every 100 ms, perf counters
//     the kernel saves on each switch; ~free.
//   - on-cpu: sampling — perf task-clock at 99 Hz per thread and a Python
//     stack read per sample; about 1 % of one CPU.
//   - off-cpu: tracing context switches — an eBPF program on sched_switch
//     and sched_waking (or perf switch records), a Python stack read per
//     wait over ~1 ms; grows with the target's switch rate.
//   - trace: tracing — eBPF raw_syscalls filtered to a few calls, never
//     ptrace (it would stop the target twice per call): the phase is
//     skipped when eBPF is refused.
//   - python: introspection — one unsynchronised read of every thread's
//     stack; nothing is stopped.
//
// Target stopped: 0 s (no phase stops the target). Truth read: what each
// engine reads (their doc.go).
//
// Cannot see: on-CPU stacks while phase 3 runs and waits while phase 2
// runs (the phases take turns, so a behaviour that changes within the
// budget is seen by one phase only); anything after the procedure stops
// (throttled, queued, interrupted); native frames of hot C code; syscalls
// outside phase 4's list, and calls already blocked when the trace
// attached (the waits show those); waits that IdleWaits calls idle but
// that matter to the user (a consumer starved on Queue.get).
package diagnose
