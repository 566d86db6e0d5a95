package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonoNow is CLOCK_MONOTONIC in ns: the clock pyobs asks perf events to
// stamp their records with, so a record's age is MonoNow() - its time.
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// ObserverCPU is pyobs's own CPU time so far (user + system, all threads):
// what every command reports as its perturbation.
func ObserverCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ThreadCPU is the calling OS thread's CPU time so far (a goroutine must
// be locked to its thread for two readings to be its own).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
