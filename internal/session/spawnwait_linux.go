package session

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// waitExited blocks until the child pid has exited, without reaping it and
// without taking any other notification. pyobs is both the parent of a
// spawned target and, during dump --lock, its tracer; a parent that traces
// its own child is told of every ptrace stop by any wait of any of its
// threads, whatever the flags (kernel/exit.c: wait_task_stopped with
// ptrace set). A plain cmd.Wait in another goroutine would take the stop
// Freeze waits for: Freeze would wait forever with the target stopped, and
// the session would take the stop for an exit. WNOWAIT leaves every
// notification where it is; once the exit is there, cmd.Wait reaps it.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: nothing to wait for; cmd.Wait says why
		}
		switch info.Code {
		case cldExited, cldKilled, cldDumped:
			return
		}
		// A ptrace stop (CLD_TRAPPED) that belongs to Freeze: let it take it.
		time.Sleep(time.Millisecond)
	}
}

// si_code values of SIGCHLD (include/uapi/asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)
