// Package red measures Rate, Errors and Duration of a server from
// outside, at the syscall boundary, per listening port (pyobs red): one
// process, or a set (a pre-forking server's master and workers, a cgroup).
//
// Truth it reads: the observed processes' own socket syscalls, seen by an
// eBPF program on the raw_syscalls sys_enter/sys_exit tracepoints (raw_tp:
// attached by name, no tracefs, no kprobes) filtered in the kernel by the
// set's members (procset.h: one seeded tgid, or a set that grows at fork;
// a spawned command held before its exec until the programs are on):
// accept/accept4 (which listening fd a connection came from, and that
// socket's local port, read by the kernel at the accept through the
// task's fd table — right even for a process gone before its /proc could
// be read),
// read/readv/recvfrom/recvmsg and write/writev/sendto/sendmsg/sendfile
// (when, how many bytes, and a copy of the first 128 bytes of each),
// close and shutdown — each with whether its fd was a socket at the call
// (the kernel's read of the fd's inode; a close's at its entry), so that
// an fd first seen after the start is asked of /proc only if it was a
// socket then: a file's number taken by a connection before pyobs looks
// is not that connection. Listening sockets and connections that were open
// before the start are found in /proc/PID/fd and /proc/PID/net/tcp{,6}
// (before the syscall programs attach); a socket the table's read missed
// (it changes under load) is asked itself, through a duplicate of the fd
// (pidfd_getfd: SO_ACCEPTCONN, getsockname), closed at once.
// In user space, HTTP/1.x request and status lines are parsed from those
// prefixes: a request runs from its first byte read to its last byte
// written before the next read on that connection (keep-alive and
// pipelined requests are split). Anything else gets connection-level RED.
// In a set, fds are keyed by (pid, fd): a listening socket inherited
// across fork is one port, and a request is counted for the process that
// accepted its connection (the per-process breakdown); a member's exit
// ends the connections it left open.
// Stacks for --slowest and --profile are walked in the kernel
// (internal/red/sampler: a task-clock tick per CPU walks the target's
// running thread; each switch-out of one of its threads walks the stack it
// blocks in, sent as a wait of half a period or more) and joined here to
// the request the thread was serving at that instant: by tid and time,
// once the request ends (ticks are read before the syscall events that
// end a request; a thread's samples wait 30 s for their request). While a
// request is in flight longer than a poll period, the handling thread's
// Python stack is also read with the user-space frame walker (the thread
// is usually blocked, so the read is exact): the only source when the
// kernel walk is unavailable, and the report says why.
//
// Price: eBPF tracepoints on every syscall of the machine (a hash lookup
// for other processes), one ring-buffer event per watched syscall of the
// observed processes, read by user space in batches (it sleeps 5 ms when the ring is
// empty: events carry kernel times, so batching costs no accuracy).
// With stacks: the sampler's price (its doc.go), and in user space a map
// lookup per tick and a scan of the thread's samples per request end.
// Nothing is stopped.
//
// Cannot see: TLS plaintext (only connection-level numbers, "not
// parsed"); time a request waits in the kernel's accept or socket buffer
// before the server reads it (queue time accept→first read is shown when
// the accept was seen); HTTP/2; requests whose first bytes arrive in a
// buffer larger than 128 bytes after another request in the same read
// (pipelined requests beyond the copied prefix are counted but unnamed);
// io_uring and sendmmsg/recvmmsg; the Python stacks of a member of
// another CPython build than the target's ("[python stack not named: …]";
// each member's are named through its own memory, an exec'd python of the
// target's build walked with its own addresses: kwalk.Members), and
// user-space stack reads of any member but the target;
// which coroutine an asyncio server runs for a request (the handling
// thread is the event loop, so --slowest shows the loop's stack, and a
// tick of the loop joins every request in flight on it); samples of a
// request served longer than 30 s, its first ones (dropped by then).
// Syscall numbers and register offsets are x86_64's.
package red
