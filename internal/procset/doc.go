// Package procset is the user-space half of a set of observed processes
// (internal/bpf/include/procset.h is the kernel half): it configures a BPF
// object that includes procset.h (follow forks, a cgroup), seeds its
// `procs` map, attaches the fork/exec/exit programs, and keeps the account
// of the set from the events the kernel sends: every process that was a
// member, how it joined (seed, fork of a member, the cgroup), when, its
// parent, its command line (read when user space learns of the join), its
// execs and its exit.
//
// Price: counting. Three raw tracepoints that run on every fork, exec and
// exit of the machine; each looks up one hash map entry and returns unless
// the process is a member (or, with a cgroup, compares one id). A member's
// join, exec and exit send one 32-byte event.
//
// Truth read: the kernel's own fork/exec/exit of each task, at the
// instant: a child is a member before it runs its first instruction, so
// the engine's filter sees all of it. The command line is read from /proc
// when the event reaches user space: a process that exits (or execs)
// before that keeps the name of what it ran then, or none.
//
// Cannot see: processes that a member's child re-parented away before
// pyobs started (a daemon that double-forked earlier: use --cgroup);
// members lost when the map (8192 processes) is full or the event ring
// overflowed (both counted); a process's exit code.
package procset
