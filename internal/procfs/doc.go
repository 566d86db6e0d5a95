// Package procfs reads the counters and states the kernel keeps for every
// task anyway: /proc/PID and /proc/PID/task/TID (stat, status, wchan,
// syscall, schedstat, io, smaps_rollup), through prometheus/procfs where it
// covers a file and small parsers of our own where it does not.
//
// Price: free — a few file reads, nothing is stopped or traced.
// Cannot see: where in the program time goes (no stacks); states are a
// snapshot at the moment of the read, so a thread that blocks for a
// microsecond between reads is never seen blocked.
package procfs
