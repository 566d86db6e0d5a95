// Package ptrace stops and resumes a target's threads with PTRACE_SEIZE and
// PTRACE_INTERRUPT — never PTRACE_ATTACH, which sends SIGSTOP, can leave a
// group stop behind and makes blocked syscalls return EINTR in the target.
//
// Price: every stop is two context switches and a scheduler round trip per
// thread; while frozen, the target does no work at all (the time is reported).
// All ptrace requests for a tracee must come from the OS thread that seized
// it, so a Freezer owns one locked goroutine.
//
// A process already in a job-control stop (SIGSTOP, SIGTSTP) is seized in
// its group stop, which counts as stopped (Frozen.JobStopped); detaching
// leaves it stopped, as the kernel re-arms the group stop: never continued.
//
// Cannot see: anything by itself; it only gives other engines a moment in
// which the target's memory is still.
package ptrace
