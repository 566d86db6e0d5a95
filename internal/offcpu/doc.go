// Package offcpu measures where a Python process's threads wait: every
// off-CPU interval of every thread, weighted in microseconds, attributed to
// the Python stack the thread was blocked in and to a wait class (lock, GIL,
// sleep, pipe/read, network/poll, disk I/O, stopped, run-queue, other).
// A select, pselect6, poll or ppoll given no descriptor and a timeout is a
// sleep, not network/poll: it only waits its timeout out (CPython 3.10's
// time.sleep is pselect6(0, NULL, NULL, NULL, &ts); select.select([], [],
// [], t) and an empty poll() on any version). procfs gives all six
// arguments; the eBPF engine reads them at the switch-out (below). One
// with no timeout (a wait for a signal) and an epoll_wait stay
// network/poll: an epoll set's emptiness is not in the call's arguments.
// "stopped" is time the thread did not run because it was stopped, not
// because it waited for anything of its own: a job-control stop (SIGSTOP,
// SIGTSTP, SIGTTIN/SIGTTOU; /proc state T) or a tracer's stop (ptrace:
// state t) — a stopped thread still shows the call it will restart (a
// futex, a sleep), so that call must not name the wait. The eBPF engine
// takes it from the switch-out's prev_state (__TASK_STOPPED,
// __TASK_TRACED: exact, for every stop however short) and, for a wait
// without it, from the kernel stack (do_signal_stop, ptrace_stop); the perf
// engine, and both for a thread already stopped at the attach, from procfs
// (state T or t) while the stop lasts. Two engines
// share the Python-stack reading, the classification (Classify) and the
// profile: RunBPF (primary) and the perf engine (the fallback); Run picks
// one (internal/fallback: eBPF, else perf, saying why in Result.Fallback),
// applies --exclude, and render.go writes the summary, JSON and footer.
//
// eBPF engine (bpf.go, kernel half in schedbpf): one program on
// sched_switch stamps each switch-out of a target thread (prev is current
// there) with CLOCK_MONOTONIC, its kernel stack id, prev_state, the
// syscall number, its first argument's GIL bit, whether it is a
// select/poll on no descriptor with a timeout (F_NOFDS: nfds and the
// timeout are read only when the call is select, pselect6, poll or ppoll —
// one or two more 8-byte reads of the saved user registers then, a few
// compares on every other switch) and the user instruction pointer, and
// walks the thread's Python stack right there (pywalk.h, the
// walk record's kernel walker uses: internal/kwalk); at the switch-in it
// adds the interval to an in-kernel aggregate keyed by the stacks' ids;
// only sums reach user space, and each distinct Python stack once, through
// a ring, named at once (kpy.go). So every wait, however short, has the
// Python stack it blocked in. A second program on sched_waking notes when
// a target thread is woken: the switch-in splits a blocked wait there —
// blocked until the waking (the wait's class), then runnable, waiting for a
// CPU (run-queue): on a busy machine that delay can be most of the
// interval, and it is the scheduler's, not the lock's. Where the kernel
// refuses the walk (bpf_loop: 5.17+), or the build has no kernel layout
// (free-threaded 3.14t+), user space looks every ~1 ms at the threads that
// are off CPU, reads the Python stack of each new wait and hands the
// kernel an id for it, keyed by (tid, switch-out time); the kernel keys the
// wait under that id at the switch-in — only if the thread was still off
// CPU once the id was in place, so the read was consistent; a wait that
// ended before it was looked at still has its exact time, kernel stack and
// class, folded under [short waits: not read] instead of a Python stack. Kernel frames are named from /proc/kallsyms; of the user
// stack only the syscall's return address (libc) is kept: CPython here has
// no frame pointers, so the kernel's user stack walk is garbage beyond it.
// --waker adds a program on sched_waking (it runs in the waker's context;
// sched_wakeup may run on the wakee's CPU from an IPI, where current is not
// the waker) that notes the waker's tid, comm and kernel stack per wakee;
// the switch-in joins the wait to it (only a waking after the switch-out
// counts) in a second aggregate. User space folds those waits with
// [woken by] and the waker's kernel frames (the whole stack: an interrupt
// taken inside __schedule is where the wake-up was made) after the class,
// and the rest of each aggregate without. In interrupt context current is
// whatever task was interrupted, which woke nobody: a waker stack with a
// hard IRQ's or softirq's handler frame, or a timer callback
// (hrtimer_wakeup, process_timeout), is labelled "[interrupt: KIND] while
// NAME (TID, …) ran" (waker.go: the innermost such frame decides; an
// interrupt's entry frame alone does not, as its return path runs signal
// delivery and preemption in task context). A waker whose stack id failed
// (counted) is "[waker's stack not taken: the task or an interrupt] while
// NAME (…) ran": the task or an interrupt it ran, not told apart (it was
// labelled the task, and a timer's wake-up of a sleeper read as pyobs's). Waits that began before the attach or were
// still open at the end have no waker.
// Waits in progress at the attach are read from procfs
// (/proc/PID/task/TID/{stat,syscall,stack}) like the perf engine does.
// A thread's on-CPU time is its run time as the scheduler counts it (the
// task's se.sum_exec_runtime read at each switch-in and switch-out): the
// interval between the two also holds what the hypervisor stole and
// interrupts took, which the thread's own CPU time leaves out (on this
// VM, beside a CPU hog, up to 20 ms of 0.19 s); that part is reported
// apart (on_cpu_not_running_s).
//
// perf engine (offcpu.go): the kernel's context-switch records
// (perf_event_open, a software dummy event per thread with context_switch
// and sample_id_all, CLOCK_MONOTONIC; PERF_RECORD_SWITCH with the
// switch-out and preempted flags). For a thread still off-CPU when the
// rings are drained (every ~1 ms), its Python stack is read at once — it
// cannot change while the thread is off CPU, and the read is kept only if
// the thread's ring stayed quiet during it — and so is its wait reason:
// /proc/PID/task/TID/{stat,syscall,wchan}, the futex address (inside the
// interpreter's GIL state → GIL, else lock) and, for a read, what the fd
// is (/proc/PID/fd/N → pipe).
//
// --greenlets (greenlet.go; the perf engine, always: it needs each wait
// as an interval in user space, where the eBPF engine only hands sums
// over): each wait read is rooted at "[greenlet] NAME" frames of the
// greenlet its thread was running and of that greenlet's parents, read
// (greenlet.Tracker: one 8-byte read of greenlet's per-thread state) just
// before and after the stack, at the look — the closest user space gets to
// the switch-out, and exact: a thread off CPU cannot switch greenlets. A
// gevent hub's wait in its event loop (the running greenlet a hub, class
// network/poll) is not the hub's: it is given, whole, to each greenlet
// parked in a gevent wait during it (greenlet.Snapshot.Parked: suspended
// with saved frames, parent a hub, or the thread's main greenlet), under
// that greenlet's own stack and the class "greenlet wait" — so the sum
// over greenlets may exceed wall time (said in the report, the footer and
// the JSON). Who was parked comes from full greenlet scans (a GC walk,
// ~10-20 ms on a small program) every 200 ms, or 20 times a scan's
// duration if longer (≤ 5 % of a CPU; a scan also delays the next look by
// its duration); a due scan waits up to one more period for a hub blocked
// in its loop, to start inside that wait. A scan that lies inside the
// hub's wait is exact (nothing of that thread runs then); else a greenlet
// counts when the scans just before and just after the wait both show it
// parked at the same stack, and one only one of them shows is left out
// (its greenlet wait counted as uncertain: many, in a program whose
// greenlets live shorter than the scan period).
// A hub wait neither rule settles (no scan before or after it, a failed
// scan, greenlets changed between scans, none parked) stays under the hub
// with a "[hub wait: greenlets not told: REASON]" frame, counted. A
// greenlet that blocks its thread for real (unpatched time.sleep, a lock)
// keeps that wait under its own root. An unknown greenlet layout: one
// line, and the plain report. Cannot see: the greenlet of a wait shorter
// than a look (under [short waits: not read]); a hub blocked in its loop
// while a callback, not the loop, blocks (same class: attributed too).
//
// -- CMD (bpf.go runHeld): the command is held before its exec while the
// program loads and attaches unarmed; a program on sched_process_exec
// arms it at that process's exec (its attach time from then on), so the
// holder's wait and its runtime's threads are not the target's, and
// everything the command does is observed. The walk's layout is read
// from the command's files before its exec (pyframes.CommandLayout) and
// fixed at load (the program built with OFFCPU_LATE); the process's
// addresses and TLS offsets are written once the interpreter is up, the
// walk turned on last, and an interpreter of another build than the files
// named is not walked (said why). A command whose files name no
// interpreter (a shell wrapper) gets the program built with OFFCPU_HELD,
// its whole configuration written then, dormant first: the verifier
// checks it for every layout, a longer load while the command waits
// (result.bpf held_s, held_layout). A wait that began before carries
// FlagPrePy and is folded under [before the interpreter] unless it was
// still going on then (a look reads its stack). No schedstat check of
// on-CPU time for these threads (no reading at the exec).
//
// Sets (the session's SetSpec: several -p, --children, --cgroup, --all,
// -- CMD and what it forks; the eBPF engine only, set_amd64.go): the
// program filters by the set's members in the kernel (schedbpf, procset.h),
// so a forked child is observed from its first switch. Threads are keyed
// by tid as before; each thread's process comes from the members' task
// lists (every 50 ms), the kernel walk's samples (their tgid), else
// /proc/TID/status. A member's Python stacks are named with its own
// interpreter (kwalk.Members: opened as it joins or execs — the set's
// OnChange ends the look's sleep, and a starting one is looked at every
// 5 ms until it can be read —, again when it runs another program, the
// target too after its exec; at most 64 open, exited ones dropped first):
// the same build at the target's addresses (a fork) as is, at other
// addresses (an exec) after its addresses go in the walker's pyaddrs map,
// another build refused (its stacks "[python stack not named: WHY]", the
// account says why). User-space looks at waits the kernel
// walk did not name read the target only: another member's such waits
// stay unnamed. The waits in progress at the attach (readBefore) are
// read in every live member, through its own reader when it is walked:
// a thread that then has no switch at all in the window is off CPU for
// it, under that stack, never taken for on CPU. Each stack is rooted at "[pid N] argv…" when
// the set was asked for or more than one process was seen (-- CMD whose
// children never came gives today's output); the processes account (per
// process on/off/run-queue sums over its threads) goes to Result.Processes,
// the JSON and a footer. The kernel's stack hash does not hold the
// process: a stack of one member identical in code addresses and lines
// to another's is named once, by the first (forked workers share their
// code objects' addresses). The last thread of a member leaves the set
// (procset.h's exit) before its last switch-out, which the program then
// does not see: its window ends at its process's exit event
// (procset.Member.ExitedAt; without one, at its last event seen) and the
// time since its last switch-in is on CPU. The perf engine observes the
// target alone and says so; --greenlets refuses a set.
//
// Accounts: a context switch is counted once, at its switch-out
// (Result.Switches, ThreadStat.Switches; the footer's rate is the target's
// over the window, beside the machine's sched_switch rate over the same
// window). The top stacks' percentages (TopBlocked, text and JSON) are of
// all off-CPU time in the profile, blocked and run-queue: one whole, so
// the rows add up to at most 100 %.
//
// Price: eBPF — per target switch a few hash-map updates, three reads of
// the saved user registers (four or five in a select or poll), the Python stack
// walk (~1.5 µs on a 10-deep stack, measured from the kernel's BPF run-time
// stats, which the footer reports) and, unless the thread blocks again in
// the same call within 10 ms (the id is reused, counted), a kernel stack
// walk; a compare on every other switch and waking of the machine; one-off
// ~0.1 s of CPU to read /proc/kallsyms; user space looks every 20 ms. perf — one ring
// write per switch. Both: per wait longer than ~1 ms one Python stack read.
// Footers report switch rates, drops/lost records and pyobs's CPU. While
// the target lives its thread names are read (alive.go,
// session.ThreadNamer: by each Thread's own _native_id, never through its
// ident, which glibc hands to the next thread; with --threads every 20 ms
// while threads come and go, else once a second), and (eBPF) once a second
// its mappings, so a spawned program that ended before the report keeps its
// thread names and native symbols. With --threads each thread has one root
// frame, "NAME (TID)" once its name is known (its earlier waits included),
// "thread TID" when it ended before any read.
//
// Cannot see: (eBPF without the kernel walk, and perf) the Python stack of
// waits shorter than a look (their time, class and — eBPF — kernel stack
// are kept); (eBPF) a Python stack whose page was not in memory at the
// switch-out (counted as faulted); native frames beyond the
// syscall site; the waker's own Python or user stack (--waker gives its
// thread and kernel stack only); the
// on-CPU stacks (--wall folds on-CPU time under [on-CPU] only: use `pyobs
// record`); (eBPF without syscall hints, "syscall hints false" in the
// footer: the kernel refused bpf_task_pt_regs) whether a select or poll
// had descriptors — it stays network/poll. The
// perf engine also has no kernel stacks and no class for
// short waits other than preemption. The eBPF engine keys threads by the
// kernel's (init namespace) tgid: pyobs must see the target's pid as the
// kernel does (no pid namespace between them).
//
// -p PID exec'ing (bpf engine): offcpu_exec sets exec_ns at the target's
// exec, which ends the window in the kernel there; the loop sees it at its
// next look and the window's end is the exec. The perf engine ends at the
// look that sees the layout changed (session.Execed, every 5 ms at most).
// Either way the result says what the target became (exit status 3).
package offcpu
