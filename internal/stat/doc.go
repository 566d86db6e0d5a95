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
// inside a window. An attached target that exits mid-window: /proc's
// numbers end at the last poll before the exit, the perf counters (read
// after it) at the exit itself, whose time its pidfd gives; each is
// reported over its own window (report.Stat.CountersWindowS).
//
// On a set (RunSet, StreamSet per interval: several pids, their children, a cgroup's processes,
// every Python process) it samples each member at the start, every
// Options.Poll and at the end, finds members at each poll (the
// descendants of every member from one pass over /proc, the cgroup's
// cgroup.procs), and reports one line per process plus the set as one
// (report.Build over the summed samples: the set's verdicts). A process
// born inside the window counts from its fork (its start time is after
// the window's start); one that moved in counts from its discovery.
//
// A target stopped by someone else (SIGSTOP, job control: state T; a
// tracer: t) is watched by procfs.StopWatch (every thread's state every
// 100 ms) over each window: the report's "stopped" verdict says how long
// and which share of the window, and on- or off-CPU is judged over the
// time the whole target was not stopped (not at all when it hardly ran),
// so a stopped target is not sent to offcpu for its waits. On a set the
// members' stops are not watched.
//
// Price: counting — file reads from /proc and /sys, and perf counters the
// kernel saves on each context switch. Nothing is stopped; ~free.
//
// Cannot see: where time goes (no stacks: record and offcpu say where);
// states between two polls (a short block is not seen); for a spawned
// command, the instants before the perf counters were opened, and the
// per-thread numbers after the last poll before its exit. On a set: a
// child that lives less than one poll (it is missed), a member's numbers
// between its last poll and its exit (but its CPU then, when its parent
// is a living member that reaped it: the parent's cutime and cstime grow
// by the child's whole CPU; children of one parent that exit between the
// same two polls share that rest evenly, each up to its threads × the time
// since its last poll — so a child the polls missed, reaped beside a
// member, can lend that member up to one poll's worth; and a grandchild
// reaped by a child just before the child's last poll can be taken off
// twice, crediting less), grandchildren re-parented away from
// the set (to init or a subreaper), and perf counters (not opened: they
// inherit into children and would count them twice).
package stat
