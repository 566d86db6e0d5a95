// Package stat is pyobs stat's meter: it measures one process and each of
// its threads over a window (Run), per interval (Stream), or a spawned
// command over its whole run (Run), and hands the two snapshots to
// internal/report, which computes the USE tables and the verdicts.
//
// Truth it reads: procfs (per process and per thread stat, status,
// schedstat, io, smaps_rollup, fd count against RLIMIT_NOFILE, wchan),
// the cgroup's cpu.stat and quota (v1 or v2) and its pressure stall
// information, perf counters (internal/perfevent: software events and,
// where the machine has a PMU, hardware events, opened as groups and
// scaled when multiplexed), and for a spawned command its rusage from
// wait4. Thread states and wait channels are polled every Options.Poll
// inside a window.
//
// Price: counting — file reads from /proc and /sys, and perf counters the
// kernel saves on each context switch. Nothing is stopped; ~free.
//
// Cannot see: where time goes (no stacks: record and offcpu say where);
// states between two polls (a short block is not seen); for a spawned
// command, the instants before the perf counters were opened, and the
// per-thread numbers after the last poll before its exit.
package stat
