package session

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Adopt hands a session the end of life of a program an engine started
// itself: the ptrace syscall tracer must be its child's only waiter while it
// traces, so it spawns CMD on its own. exited and code say whether the
// engine already reaped it, and its status. Finish then waits for it as for
// any spawned program (interrupted: the signal passed on, Grace, SIGKILL) and
// returns its status.
func Adopt(pid int, exited bool, code int) *Session {
	s := &Session{Pid: pid, adopted: true, adoptedCode: code, waited: make(chan struct{})}
	if exited {
		close(s.waited)
		return s
	}
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		s.adoptedCode = StatusCode(ws)
		close(s.waited)
	}()
	return s
}

// AdoptWaiting is Adopt for a program its engine still waits for (a tracer
// that cannot let go): wait blocks until it ended, and what it started
// that the engine waits for too, and returns its status; signal sends
// them all a signal (nil: the program alone).
func AdoptWaiting(pid int, wait func() int, signal func(syscall.Signal) error) *Session {
	s := &Session{Pid: pid, adopted: true, waited: make(chan struct{}), adoptedSignal: signal}
	go func() {
		s.adoptedCode = wait()
		close(s.waited)
	}()
	return s
}

// finishAdopted: Wait lets the program run to its end, as Finish does for
// a spawned one; when ctx ends first (SIGINT, SIGTERM) the signal is
// passed on to it, then SIGKILL after Grace. Kill ends it now.
func (s *Session) finishAdopted(ctx context.Context, end End) int {
	if end == Wait {
		select {
		case <-s.waited:
			return s.adoptedCode
		case <-ctx.Done():
		}
		endInterrupted(InterruptSignal(ctx), s.Pid, s.signalAdopted, s.waited)
		return s.adoptedCode
	}
	_ = s.signalAdopted(syscall.SIGTERM)
	select {
	case <-s.waited:
	case <-time.After(KillGrace):
		_ = s.signalAdopted(syscall.SIGKILL)
		<-s.waited
	}
	return s.adoptedCode
}

// signalAdopted signals the adopted program (and, from AdoptWaiting, what
// its engine waits for with it).
func (s *Session) signalAdopted(sig syscall.Signal) error {
	if s.adoptedSignal != nil {
		return s.adoptedSignal(sig)
	}
	return syscall.Kill(s.Pid, sig)
}
