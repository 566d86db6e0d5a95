// Package kwalk walks the current thread's CPython stack in the kernel, at
// the instant of a sampling event: an eBPF perf_event program (one
// task-clock or cpu-clock event per CPU, filtered by tgid in the program,
// so threads born during the run are sampled from their first tick) finds
// the thread state, follows the frame chain with bpf_loop and sends each
// sample — tid, time, flags, and per frame the code object address and
// instruction offset — through a ring buffer. User space only symbolizes
// (Symbolizer: pyframes' code-object reader, cached by address).
//
// Truth it reads: the interpreter's own memory, read from the sampled
// thread itself (bpf_probe_read_user) while it is interrupted, so the
// stack is the one of that instant — no race with a running target.
// Layouts come from internal/pyframes (the _Py_DebugOffsets table on
// 3.13+, per-version tables before; pyframes.KernelLayout). On 3.12+ a
// thread running Python is attached to its state (the static TLS
// _Py_tss_tstate, pyframes.Process.AttachedTLS): read with its frame,
// interpreter and thread ids in one read, checked (thread_id == fsbase,
// native_thread_id == tid) and, when it is the main interpreter's, it is
// the thread's stack — no map lookup. Otherwise (3.10/3.11, a detached
// thread, a sub-interpreter) the thread
// state comes from a tid/pthread_t map that user space fills (SetThreads)
// or, for threads it has not listed yet, from the runtime's own per-thread
// pointer at a fixed offset from the thread's fsbase (pthread TSD slot of
// autoTSSkey on 3.10–3.14, TLS _Py_tss_gilstate on 3.15), found by
// pyframes.TLSOffsets and checked per sample (thread_id == fsbase,
// native_thread_id == tid). A thread running a sub-interpreter's code
// (3.12+) is walked from the state it is attached to now: the
// sub-interpreter's chain, then, when it is whole, the chain of the map's
// state for the thread (user space keys a thread to its state in the
// lowest interpreter, the one it started in), whose frames called into
// it. Without that state (a thread the map does not list yet: 3.12+'s
// gilstate slot follows the attached state) a sub-interpreter's stack is
// flagged truncated, its callers missing. The walk runs as one global
// function (pywalk_chain, verified once with its arguments unknown: the
// walk state is handed over through a per-CPU map), called once per
// chain. Every frame is checked (owner in range,
// code's ob_type == &PyCode_Type, frame != previous, a generator frame
// below the top is EXECUTING); a walk is Complete only if the chain ended
// at the version's outermost marker (3.11 is_entry, 3.12–3.14 the entry
// shim, 3.15 tstate->base_frame; 3.10 f_back NULL). Anything else is
// flagged truncated, faulted or invalid, and counted — never reported as
// a good stack.
//
// Price: per event on any task of the CPU a tgid compare (~0.1 µs of
// program time here); per sample of the target, on 3.11+ one read of the
// 4 KiB page that holds the top frame (its callers in the same data-stack
// chunk come with it; a frame far from the one before — a generator's on
// the heap, the entry shim on the C stack — is read alone, its header
// (72–80 bytes) with the 8 before it (a generator's state), and the page stays for the frames
// after it; a caller in another page of the chunk costs that page), on
// 3.10 one read per frame object, plus a type read per code object not
// seen lately on that CPU, on 3.12+ the attached-state pointer and its
// state's header (two reads in place of a map lookup and three), and a
// ring-buffer record of
// 48 + 16·depth bytes. The reader is woken only when a sixteenth of the
// ring is full (each wake-up is an interrupt: a VM exit on a guest) and
// polls every Options.Latency; while a program observed starts
// (SetUrgent) every record wakes it, so that the code objects of an
// import, freed as it ends, are read while they live. Measured here (2-vCPU VM, 20 kHz, bpf
// stats; TestKernelWalkCost*): 1.3–2.6 µs of program time per sample of a
// 12-frame stack, ~6 µs at 122 frames (the attached-state read and the
// walk as a global function added 0.1–0.3 µs: TestKernelWalkCostByDepth
// on 3.13 1.49–1.52 → 1.68–1.76 µs at 12 frames, 5.8–6.1 → 5.95 at 122;
// the program's verification fell from ~92,000 instructions to ~28,000).
// Taking the attached main-interpreter state without the map lookup, and
// a per-CPU memory of the stacks sent in front of the `sent` map, took
// 3.12's 12 frames at 20 kHz from 3.25–4.16 to 2.33–2.85 µs of program
// time (TestRecordKernelCost, alternated; BENCHMARKS.md). A window read
// only up to the top frame (a size the verifier must bound) made it track
// the frame addresses across steps: 2–4x the instructions at load. The
// frame's read is a global function (frame_at), verified once: the step
// after it is checked once whatever path the read took (kwalk_sample
// 27.7k → 7.8k instructions at load). Timed by phase (BENCHMARKS.md,
// sixteenth session): a user read costs ~0.12 µs whatever its size up to
// 96 bytes (a page 0.27), so the walk's price is its number of reads; the
// aggregation's two hash maps (sent check, count) cost ~0.6 µs more, paid
// now only when a sample's key is not in its CPU's count cache (128
// slots, one page per CPU: 65 % of kwalk_deep's samples hit it, 6 % of
// many_paths'; counted, CCacheHit).
//
// Clocks: per-CPU task-clock and cpu-clock events with the tgid filter
// both delivered 100–107 % of the target's on-CPU time × F in this VM
// (schedstat; TestKernelWalkCost); task-clock is the default.
//
// What it cannot see: native frames; frames deeper than MaxFrames (128;
// flagged truncated); pages not present (a fault fails the sample: the
// program cannot sleep to bring them in); a thread whose thread state is
// neither in the map nor at the TLS offsets (dlopen'ed libpython: counted
// as not-Python); a thread detached inside a sub-interpreter (a blocking
// call there: no attached state) is walked in the calling interpreter's
// frames alone; a thread born in a sub-interpreter while it runs code of
// the main one is walked in the main one's frames alone; free-threaded
// builds with thread-local bytecode (3.14t+: pyframes refuses them; 3.13t
// is walked, its own object header from the layout). 3.11/3.12 samples taken while the
// evaluator sets up its cframe read a stale frame and come out truncated.
// Code-object names are read after the fact, checked against the
// code-object generation each sample carries (3.14+: bumped at each free;
// 3.12/3.13: the next co_version, bumped at each creation, read from
// interp->func_state on 3.13 and from the .symtab symbol
// _Py_next_func_version on 3.12): a code object freed and its address
// reused before pyobs read it is not named (3.12/3.13) rather than
// misnamed. Without a generation (3.10/3.11, a stripped 3.12) a code
// object freed and its address reused within Symbolizer.Revalidate can be
// misnamed.
//
// Sets (Options.Set): the program filters by procset.h's members instead
// of one tgid (a hash look-up per event of any task), each sample carries
// its tgid, and Walker.Set keeps the account. The layout is the target's;
// a member of the same build mapped at other addresses (an exec'd
// interpreter: ASLR) is walked with its own PyCode_Type, PyFrame_Type and
// code-generation addresses once user space put them in pyaddrs
// (PutAddrs, by Members after SameBuild); until then its walks fail the code type
// check and are counted invalid. A member of another layout cannot be
// walked: user space refuses it. The per-CPU code-object type cache is
// keyed by address alone: across processes it can pass a frame whose code
// object user space then fails to read (counted unreadable, not named).
//
// A command held before its exec (Options.Late) is sampled from its first
// instruction, each sample counted unwalked until Configure. Its layout
// is read from the command's files (pyframes.CommandLayout) and fixed at
// load (kwalklate: only the process's type addresses, code generation
// and TLS offsets come with Configure, which refuses an interpreter of
// another build, ErrOtherBuild); a command whose files name no
// interpreter gets kwalkheld, whose whole configuration comes then — a
// program the verifier checks for every version's branches (longer load,
// and without 3.11/3.12's entry start-over).
//
// Built by bpf2go (`make generate`; shared kernel types and helpers from
// internal/bpf/include/pyobs.h, the walker's own in kwalk.bpf.c), loaded
// and read through internal/bpfload (memlock, gate and verifier errors,
// the pid-namespace check, ring buffer, per-CPU counters).
package kwalk
