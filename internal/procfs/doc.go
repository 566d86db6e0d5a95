// Package procfs owns every read of the proc filesystem: nothing else in
// pyobs opens a file under /proc. It reads the counters and states the
// kernel keeps for every task anyway — /proc/PID and /proc/PID/task/TID
// (stat, status, wchan, syscall, schedstat, stack, io, smaps_rollup,
// limits, cgroup, fd, net/tcp, ns/pid) — the address space's layout
// (maps, the one Mapping type of pyobs; mem, map_files and root for the
// readers of memory and mapped files), and the system's own files
// (kallsyms, loaded once and kept; stat; sys/kernel). One file per kernel
// file, its type named after it; prometheus/procfs is used where it covers
// a file, small parsers of our own where it does not (each says why).
// StopWatch (stops.go) looks at a process's thread states, or every live
// member's of a set, every 100 ms from its own goroutine, for the commands
// that must tell a target stopped by someone else (SIGSTOP, job control, a
// tracer) from an idle one.
// Every reader hangs off an FS rooted at a mount point, so tests run on the
// fixture tree in testdata/procfs; errors name the pid, tid and path.
//
// A process whose main thread exited while others run on has a zombie
// leader: Process reports a live thread's state, and the files reached
// through the leader's memory or filesystem (maps, mem, root, map_files,
// exe, cwd, cmdline) are read through a live thread (leader.go).
//
// Price: free — a few file reads, nothing is stopped or traced
// (kallsyms: ~0.1 s of CPU once per process).
// Cannot see: where in the program time goes (no stacks); states are a
// snapshot at the moment of the read, so a thread that blocks for a
// microsecond between reads is never seen blocked.
package procfs
