package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Interrupt is the cause of a context that SIGINT or SIGTERM ended
// (NotifyInterrupt): which signal told pyobs to stop.
type Interrupt struct{ Signal syscall.Signal }

func (i Interrupt) Error() string { return "interrupted by " + unix.SignalName(i.Signal) }

// NotifyInterrupt returns a context ended by the first SIGINT or SIGTERM,
// its cause an Interrupt naming the signal, so that a spawned program is
// given that same signal (endInterrupted). Later signals stay caught: the
// output in the making is still written.
func NotifyInterrupt(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(Interrupt{sig.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// InterruptSignal is the signal that ended ctx (NotifyInterrupt); SIGTERM
// when ctx ended otherwise.
func InterruptSignal(ctx context.Context) syscall.Signal {
	var i Interrupt
	if errors.As(context.Cause(ctx), &i) {
		return i.Signal
	}
	return syscall.SIGTERM
}

// endInterrupted ends a spawned program because pyobs was told to stop:
// the signal pyobs got is passed on (a SIGTERM or a kill -INT sent to pyobs
// alone never reaches it), the program gets Grace to end, then SIGKILL.
// Only ever a program pyobs started (pid): an attached process is not
// pyobs's to end. signal is how the program is sent a signal, waited
// closed when it is reaped.
func endInterrupted(sig syscall.Signal, pid int, signal func(syscall.Signal) error, waited <-chan struct{}) {
	select {
	case <-waited:
		return
	default:
	}
	if !(sig == syscall.SIGINT && ctrlCReached(pid)) {
		_ = signal(sig)
	}
	select {
	case <-waited:
	case <-time.After(Grace):
		_ = signal(syscall.SIGKILL)
		<-waited
	}
}

// ctrlCReached: the program shares pyobs's process group and that group is
// its terminal's foreground one, so a SIGINT was most likely a Ctrl-C,
// which the terminal sent to the program too: a second one would land in
// its KeyboardInterrupt handling (cleanup cut short). It is not sent again.
func ctrlCReached(pid int) bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal: no Ctrl-C
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return false
	}
	pg, err := unix.Getpgid(pid)
	return err == nil && fg == unix.Getpgrp() && pg == fg
}

// InterruptedError: pyobs was told to stop (SIGINT, SIGTERM) before it did
// what it spawned the program for (dump --after not yet elapsed). The
// program was ended; pyobs exits 128+signal.
type InterruptedError struct {
	Signal syscall.Signal
	Pid    int
	Code   int           // the program's status (128+signal when a signal ended it)
	Ran    time.Duration // since the program started
	After  time.Duration // Spec.After
	Python bool          // the program had run Python code
	Before string        // "the dump" (set by the command); empty: "pyobs read it"
}

func (e *InterruptedError) Error() string {
	before := e.Before
	if before == "" {
		before = "pyobs read it"
	}
	when := fmt.Sprintf("%.1f s after the program started, before it ran Python code", e.Ran.Seconds())
	if e.Python {
		when = fmt.Sprintf("%.1f s after the program started, while waiting --after %s", e.Ran.Seconds(), e.After)
	}
	return fmt.Sprintf("interrupted by %s before %s (%s): nothing was read; the program (pid %d) was ended, status %d",
		unix.SignalName(e.Signal), before, when, e.Pid, e.Code)
}

// ExitCode is the shell's status of a process ended by the signal pyobs got.
func (e *InterruptedError) ExitCode() int { return 128 + int(e.Signal) }
