// Package ptrace is the syscall tracer of `pyobs trace --engine ptrace`
// (the trace driver, internal/trace, decodes, aggregates and renders; this
// package only stops threads and reports each finished call).
//
// Every thread of the target is seized (PTRACE_SEIZE with TRACESYSGOOD,
// TRACECLONE, TRACEEXEC and TRACEEXIT), interrupted once and resumed with
// PTRACE_SYSCALL, so each syscall stops the thread twice: at entry and at
// exit. New threads are followed (TRACECLONE); forks are not (no
// TRACEFORK/TRACEVFORK, and a clone that makes a new process is detached),
// except under a seccomp filter (below).
// Signals are passed through: a signal-delivery stop is resumed with the
// signal; a group stop (SIGSTOP, SIGTSTP, …) is kept with PTRACE_LISTEN.
// Nothing ever injects EINTR: a syscall interrupted by one of our stops
// returns ERESTART* internally and the kernel restarts it, as no handler ran.
//
// Price: two stops (four context switches) per syscall of every thread,
// whether or not the call is of interest. What is measured of it is the
// time from each stop's report to pyobs until pyobs resumed the thread
// (TraceStats.Stopped): a lower bound of the time the stops held the
// target, without the switches into and out of each stop (the kernel
// says when a stop ends, never when it began). A loop of 20,000 writes
// to /dev/null here ran 0.009–0.018 s bare and 0.56–0.99 s traced while
// that sum was 0.05–0.08 s (2026-12-04): the switches are most of the
// price on this VM.
//
// Seccomp (spawn only, TraceConfig.Seccomp): the command is started
// through a re-exec of this program (SeccompExec) that sets
// PR_SET_NO_NEW_PRIVS, installs a seccomp filter returning SECCOMP_RET_TRACE
// for the traced numbers and allowing the rest, and execs the command. The
// tracer then resumes threads with PTRACE_CONT: only a traced call stops,
// at its seccomp stop, and is resumed with PTRACE_SYSCALL to see its exit.
// Untraced calls never stop. The command keeps no_new_privs (setuid
// programs it execs do not gain privileges).
//
// A filter cannot be removed, and a filtered call without a tracer fails
// with ENOSYS: asked to stop early, Trace returns the window's stats at
// once (TraceStats.Attached) while its tracer stays attached, passing
// every stop through and counting nothing, until the command ends by
// itself (Attached.Wait gives its status; ending it is the caller's
// choice, never the window's). The filter passes to every process the
// command starts, so those are followed too (TRACEFORK, TRACEVFORK), only
// to have their stops passed through: a seccomp stop resumed with
// PTRACE_CONT runs the call, untraced and uncounted. The tracer stays
// until the last of them ends, and Attached.Signal reaches them all. If
// pyobs itself is killed, their filtered calls fail with ENOSYS from then
// on; that is why it is used only for commands pyobs started.
//
// Ending: the loop blocks in wait4. To end it, the caller's context is
// cancelled; a helper then "kicks" the tracer by sending one tracee a signal
// the target neither catches nor needs (SIGURG or SIGWINCH, default action:
// ignore); the tracer swallows it at its delivery stop. Every tracee is then
// interrupted (PTRACE_INTERRUPT), waited for, and detached, so none is left
// stopped or traced. If pyobs dies instead, the kernel detaches them.
//
// What truth it reads: the kernel's own account of each call at its entry
// and exit stops (PTRACE_GET_SYSCALL_INFO: number, six arguments, result),
// with the thread stopped, so its memory (arguments, Python stack) is as
// it was during the call.
//
// Cannot see: forked children's calls (never traced), calls already in progress
// when it attached (their exit has no entry: skipped), and a call's own
// latency apart from the tracer's wake-up (Dur includes both). x86_64 only
// (syscall numbers, the seccomp filter's AUDIT_ARCH_X86_64).
package ptrace
