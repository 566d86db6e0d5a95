package trace

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// ---- The end of a spawned target's life --------------------------------
// (The one place trace handles it; session.Finish takes it over at merge.)

// FinishSpawned returns the exit status of the command a trace spawned
// (128+signal when a signal ended it). If the trace stopped before the
// command ended, it waits for it, 5 s, then SIGTERM, 2 s more, then SIGKILL.
// It must not be called before Run has returned (a second waiter would
// steal the tracer's stops).
func FinishSpawned(ctx context.Context, r *Result) int {
	a := &r.Account
	if a.TargetExited {
		return a.ExitCode
	}
	var ws unix.WaitStatus
	done := make(chan struct{})
	go func() {
		for {
			_, err := unix.Wait4(a.Pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = unix.Kill(a.Pid, unix.SIGTERM)
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = unix.Kill(a.Pid, unix.SIGKILL)
			<-done
		}
	}
	_ = ctx
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
