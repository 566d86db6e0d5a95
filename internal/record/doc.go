// Package record is the sampling profiler: CPU samples from the kernel; or,
// in wall and gil modes, a timer that reads every thread (wall) or the GIL
// holder (gil). Stacks fold into a flame.Profile with the recording's own
// account of what it missed.
//
// cpu mode has two engines (Options.Engine; auto = bpf, else perf, saying
// why in one line that names the BPF gate when the kernel refused):
//
//   - bpf (kernel_amd64.go): internal/kwalk's eBPF program on one task-clock
//     event per CPU, filtered by the target's tgid, walks the sampled
//     thread's Python stack in the kernel at the sample's instant — every
//     thread, also ones born during the recording (their thread state is
//     found through their TLS from the first sample; the tid map is
//     refreshed at each look — every 200 ms, up to 1 s above 4 kHz — for the rest). User space reads the ring
//     buffer, names code objects (kwalk.Symbolizer: cached, re-validated by
//     the code-object generation each sample carries on 3.12+, by age
//     before) and folds (code
//     object, instruction) → frame ids: labels `QUALNAME (FILE:LINE)`,
//     caller lines the line of the call, as the user-space reader gives.
//     With --kernel the same program takes each sample's kernel call
//     chain into a stack-trace map (bpf_get_stackid) and counts by it; a
//     chain whose bucket holds another is counted lost and marked [kernel
//     stack lost]. With --native each sample is sent instead of counted:
//     its count key, the runs' C-stack links the walk found (3.12+), the
//     thread's user registers (task_pt_regs) and the top of its user stack
//     (natcopy.h); user space unwinds the copy with CFI at once and glues
//     the walked Python frames in by address, else by counting
//     (kernel_amd64.go drainNative; one process: the unwinder reads its
//     mappings).
//   - perf (record.go runCPU): a perf ring per thread (threads found by a
//     scan every 50 ms), each sample followed by a read of the thread's
//     stack from user space: a thread may have moved on by then (late,
//     moved, torn: counted). --async, wall and gil always use this
//     user-space reader (so do --native and --kernel when the bpf engine
//     is refused, and --native on a 3.10/3.11 binary without the eval
//     loop's symbol).
//
// Sets (set.go, set_amd64.go; bpf engine only): with a session that
// observes several processes (session.SetSpec) the walker filters by
// procset.h's members, each sample names its process, and each process is
// read through its own pyframes.Process (kwalk.Members, shared with
// offcpu, trace and red: the target's own after its exec), opened at its
// first sample or as soon as it joins or execs (procset's OnChange wakes the look: an
// exec'd interpreter of the target's build is walked with its own
// addresses once read, its samples before that [invalid frame chain]; a
// member of another build or version is refused and its samples folded
// under the reason; one that exited first is [unreadable: process
// exited], as are its last new stacks when it exits before the look that
// would name them); stacks are rooted at "[pid N] argv" when the set held more
// than one process (else the profile is the one process's, unchanged);
// SetAccount is the account. The achieved rate is per CPU-second of all
// members, each over its own window (below). The perf engine, --native,
// --async, wall and gil observe the target alone and refuse an explicit
// set.
//
// Price: bpf — ~2–5 µs of kernel time per sample in the target's context
// (bpf stats, 12–20-frame stacks; per-sample, so independent of how long
// the recording runs) plus ~0.1 µs per event of any other task on a CPU,
// ~1 µs of observer CPU per sample at 20 kHz (~12 µs at 1 kHz: the fixed
// work of each look over fewer samples), and ~0.1 s of CPU once to
// load (the verifier). The kernel's bpf stats (BPFNSPerSample) are turned
// on for the run only when kernel.bpf_stats_enabled is off (BPF_ENABLE_STATS,
// off again at the end; said in Meta.BPFStats). perf — sampling ~1 % at
// 99 Hz; each stack read costs the observer µs to ms (it grows with the
// number of distinct code objects). With --native/--kernel each sample also
// carries its native stack (internal/unwind) and kernel callchain, merged
// with the Python frames.
//
// Stopped targets (procfs.StopWatch, shared with stat, trace and top): the
// target's thread states are read every 100 ms from its own goroutine
// (/proc/PID/task/TID/stat); threads seen
// stopped by a signal or a tracer (T, t) go to Meta.Stopped and a sentence
// of the footer — such a thread is not sampled (cpu: it runs nothing), and
// an empty profile must not pass for an idle target. A set's every live
// member is looked at (procfs.WatchStopsOf): the account says in how many
// of its processes, and each process has its own (SetAccount). Price: one
// state read per thread per look, the look's period lengthened when its
// own CPU time passes 2 % of it (a set of thousands of threads).
//
// The achieved rate (cpu mode) counts the samples and the target's CPU
// over one window: up to the last reading of its /proc/PID/stat, which
// goes when it exits (a zombie's still reads: its account complete); a
// spawned command that exited is counted whole, by wait4's account of its
// own threads (session.ExitOwnCPU). So samples taken after the last
// reading of a target that exited are in the profile, not in the rate.
//
// --threads roots each stack at its thread, one frame per thread (TID and,
// when the kernel reused the TID for a new thread during the recording, a
// new frame for it), labelled "NAME (TID)" as soon as its name is known —
// samples folded before included — else "thread TID" (it ended before
// any read). Names come from each threading.Thread's own _native_id and
// _name (session.ThreadNamer), never through its ident: glibc gives a
// finished thread's pthread_t to the next. They are read every 20 ms while
// the target's threads come and go (a thread-per-request server's
// requests), else once a second.
//
// Cannot see: off-CPU time in cpu mode (by construction: use --mode wall or
// `pyobs offcpu`). With -- CMD on the perf engine, --native, --async, wall
// and gil: the command's start — it runs unheld and the recording begins
// once its interpreter is readable and the sampler is on (Meta.UnobservedS,
// said in the footer); the bpf engine holds it before its exec instead
// (held.go: kwalklate, loaded with the layout read from the command's
// files, its addresses written once the interpreter is up; kwalkheld,
// whose whole cfg is written then, when the files name no interpreter;
// the samples before are [before the interpreter], Meta.BeforePython;
// while it starts each new stack wakes the reader and its code objects
// are read at once, before its imports free them; the
// price is the load while the command waits, Meta.HeldS and HeldLayout:
// 0.2–0.4 s here with the layout read, ~0.7 s without). bpf: frames past
// kwalk.MaxFrames (128: the sample is folded as [truncated stack] with its
// innermost frames, counted truncated, like a chain that ended short,
// folded as [callers missing]); a
// sample in 3.11/3.12's eval-loop entry, whose new cframe has no frame
// yet, is walked from the outer cframe (the stack of that instant); a
// frame on a page not present (the program can't fault it
// in: [faulted: page not present], counted); a failed check ([invalid frame
// chain]); threads whose state is neither in the map nor at the TLS offsets
// ([no Python thread state]); a frame whose code object was freed before
// the look that names it ([code object unreadable], the rest of its stack
// named: Meta.PartlyNamed; a stack of which no frame can be read is
// [unreadable]; so that a short-lived program's are read while it lives,
// the look comes every 20 ms while a program observed is starting); a code
// object freed and its address reused by another before pyobs read it is
// [code object unreadable] on 3.12/3.13 (its co_version is newer than the
// sample), and can be misnamed on 3.10/3.11 (within a second: no counter
// to tell) and, rarely, 3.14+ (that counter counts frees, not creations).
// A code object is named only if it is live before and after its names
// are read. perf: what happens between the
// kernel's sample and the stack read (torn reads are detected and counted,
// not guessed).
//
// -p PID exec'ing (session.Execed): the recording ends at the first look
// that sees the target's memory layout changed (/proc/PID/stat; record's
// loops check every look, at most 200 ms). Its code objects are read
// through session.GuardCode, which trusts a read only when the layout is
// the same after it: samples of that look not named from the old program
// (taken after the exec, or whose code was not read before it) are
// [lost to the exec], counted (meta.lost_to_exec); the profile is written
// and the run's error says what the target became (exit status 3).
package record
