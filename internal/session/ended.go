package session

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// EndedError: a spawned program ended by itself before pyobs did what it
// was started for (dump --after longer than the program runs). Its status
// is the command's exit status; the message says that nothing was read.
type EndedError struct {
	Pid    int
	Code   int    // the program's exit status (128+signal when a signal ended it)
	Before string // "the dump"
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("the program (pid %d) ended by itself, with status %d, before %s: nothing was read (its status is passed on)", e.Pid, e.Code, e.Before)
}

// Unwrap: it is an exit of the target.
func (e *EndedError) Unwrap() error { return ErrExited }

// Ended turns err, an observation of a spawned program that failed because
// the program is gone, into an *EndedError with its status once it is
// reaped; any other error (or target) is returned as it is.
func (s *Session) Ended(before string, err error) error {
	if err == nil || s.cmd == nil || s.adopted {
		return err
	}
	if !errors.Is(err, ErrExited) && !errors.Is(err, ErrNoProcess) && !errors.Is(err, ErrZombie) && !errors.Is(err, unix.ESRCH) {
		return err
	}
	select {
	case <-s.waited:
	case <-time.After(time.Second): // not gone after all: the error stands
		return err
	}
	return &EndedError{Pid: s.Pid, Code: s.ExitCode(), Before: before}
}
