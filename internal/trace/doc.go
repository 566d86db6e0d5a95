// Package trace is the engine of `pyobs trace`: Run chooses the engine,
// drives it, aggregates what it reports into per-syscall rows and returns
// them with an Account; WriteText, WriteJSON and Footer render the result.
//
// Engine choice, one rule: eBPF (internal/trace/tracepoint) when asked for
// or when --engine auto can load it on a running process, else ptrace
// (internal/trace/ptrace), and the Account says why (Note, and Fallback
// with the reason eBPF could not be had, which the CLI prints before the
// trace starts). A spawned command is traced with eBPF when the session
// holds it before its exec (session.Spec.Hold: the programs are attached
// and its pid is in their set before it runs; Run releases it), else
// with ptrace, from its first instruction (with -e, under a seccomp filter
// so only the listed calls stop); a held command whose eBPF is refused is
// let go unrun and spawned by ptrace instead.
//
// Sets: the tracepoint programs filter by a set of processes
// (internal/procset, procset.h): the target alone, or several -p, their
// children from their fork on (--children, the default for -- CMD), a
// cgroup's. With a set, each member's calls, errors, time and latency
// histogram are also kept in the kernel (one per-CPU entry per process)
// and rendered as per-process lines (ProcessJSON) after the table, with
// the set's account (ProcessAccount: seen, joined late, exited, refused);
// Run ends when every member has exited. The ptrace engine follows one
// process, and the Account's Note says so when a set was asked.
//
// Price, per engine:
//   - tracepoint: no stops; about half a microsecond of kernel time per
//     syscall of the target, and one ring-buffer event per slow or failing
//     call, with the whole Python stack walked in the kernel (a few µs per
//     such call, measured in tracepoint/doc.go; the walk's account and the
//     programs' BPF run time are in the footer and JSON); user space names
//     each distinct stack once and refreshes the kernel's map of thread
//     states (every 250 ms, sooner after a new thread).
//   - a set (or a held command) is walked the same way, each member's
//     stacks named through its own reader (members.go); the
//     per-process accounts cost one more per-CPU hash update per call
//     (~0.6 µs per call in all with the raw tracepoints themselves, of
//     which those take ~0.3 µs on this VM: BENCHMARKS.md). A held
//     command waits for the programs' load and attach (~0.1–0.4 s), which
//     the Account reports apart (Attach): it is not part of its run. The
//     walk's layout is read from the command's files (PATH, #!, env, the
//     loader); when they name no interpreter (a shell script, pyenv's
//     python3 shim, which exec or run one), the programs are loaded
//     without it (syscallsheld: the verifier checks every version's
//     branches, a longer load: ~1 s against ~0.4 s on this loaded VM) and get
//     the whole walk once the first of the command's processes is Python
//     (the command after its exec, or a child it runs): that one is then
//     the target the set's others are checked against.
//   - ptrace: two stops (four context switches) per syscall of every thread,
//     10–70× slower for a syscall-heavy program; with seccomp, two stops per
//     listed call and none for the rest. The stopped time is measured.
//
// Both report pyobs's own CPU time over the window, and a target stopped
// by someone else during it (it makes no calls then, so "0 calls" is not
// an idle program): tracepoint looks at its threads' states every 100 ms
// (procfs.StopWatch, as record does: one stat read per thread per look);
// ptrace counts the group stops it keeps (a tracee's stop reads as t in
// /proc, whoever caused it). Footers say pyobs's own stops apart ("pyobs
// stopped the target").
//
// What truth it reads: the kernel's syscall entries and exits (in-kernel
// counts and histograms, or one exit stop per call with its arguments and
// result), and for slow or failing calls the Python stack — walked whole
// by the BPF program while the thread is still in the kernel (or, as the
// fallback where the kernel refuses the walk, its innermost frame alone),
// or the whole stack from the stopped thread at its exit stop (ptrace).
// A site read after the call had returned
// (the tracepoint engine's fallback for threads the kernel could not read)
// is counted as late and never attributed, as record counts its late reads.
// Calls still blocked when a tracepoint trace ends are listed with the site
// read while they block, when they have not returned after the read.
//
// Aggregation: per syscall counts, errors by errno name, a log-linear
// latency histogram (p50, p99, max; the buckets of internal/trace/bucket),
// share of wall time, the Python call sites of the calls whose site was
// read and, for stacks walked in the kernel or read at a ptrace exit
// stop, the whole call paths (each path's leaf is its call's site: the
// two views count the same calls).
// Two ways in: Add takes one finished call at a time (ptrace); AddKernel
// takes a syscall's account already aggregated in the kernel and AddPath
// (a walked stack) or AddSite (a frame, or none) each slow or failing call
// (tracepoint).
//
// Cannot see: with ptrace, forked children; with a set, the Python sites
// of a member of another CPython build than the target's (the walker
// takes one layout) and of an exec'd member's calls before pyobs read its
// interpreter (its walks fail their checks until its addresses are in the
// kernel's map: counted invalid); a held command's calls before its
// interpreter is up, or, when its files name no interpreter, before the
// first of its processes' is (calls_before_walk: counted, not named); a
// held command's own calls
// before its exec (the holder's: not counted, the exec included); calls
// in progress when it attached (not
// counted); the site of calls that were neither slow nor failing (reading a
// Python stack per call would cost more than the call: they are counted
// apart, as neither slow nor failing, never guessed; "unattributed" is only
// for slow or failing calls without a site); arguments under the tracepoint engine
// (--log prints "…"); anything the bounded kernel maps dropped (counted in
// the Account's Drops and Lost). x86_64 only (syscall numbers and names).
// A walked stack is named once, when its hash first arrives: the hash is
// of code-object addresses and (3.12+) the interpreter's code-object
// generation, so on 3.10/3.11 a stack whose code was freed and whose
// addresses were reused by other code with the same offsets keeps its
// first name (dynamically compiled code only; code objects of functions
// defined in modules live as long as their module).
//
// -p PID exec'ing (tracepoint engine): the programs stop counting the
// target's calls at its exec in the kernel (end_at_exec: procset_exec
// counted the exec); the loop sees it within 20 ms (session.Execed), ends
// the trace, and the result says what the target became (exit status 3).
// Stacks are named through session.GuardCode: none from the new program.
// The ptrace engine ends at the exec's own stop (PTRACE_EVENT_EXEC): no
// call of the new program is counted, and the result says the same.
package trace
