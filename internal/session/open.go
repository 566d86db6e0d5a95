package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
)

// NeedPython says what a command needs of the target's interpreter.
type NeedPython int

const (
	// PythonRequired: the frame walker must open (attach), or the spawned
	// program must run its first Python frame before Open returns.
	PythonRequired NeedPython = iota
	// PythonOptional: any live user-space process will do (stat, red);
	// s.Py is nil when the interpreter can't be read, and PyErr says why.
	PythonOptional
)

// Spec is what a command asks to observe: a pid, or a program to spawn.
type Spec struct {
	Pid    int
	Argv   []string // spawn this (with the caller's stdio) when Pid is 0
	Python NeedPython
	// After: with Argv and PythonRequired, how long the program may run
	// after its first Python frame before Open returns (dump --after).
	After time.Duration
	// Stdout: where a spawned program's standard output goes (nil: the
	// caller's stdout). Its stdin and stderr are the caller's.
	Stdout *os.File
	// Set: more processes than the one (engines that observe sets read
	// it from Session.Set; Open resolves --cgroup and --all into pids).
	Set SetSpec
	// Hold: with Argv, hold the program before its exec (hold_linux.go):
	// Open returns with its pid known and nothing of it run yet (s.Py is
	// nil, Python is not waited for); the engine attaches, then calls
	// s.Release (or s.Unhold to let it go unrun).
	Hold bool
}

// Grace is how long a spawned program is given to end after pyobs, told to
// stop (SIGINT, SIGTERM), passed the signal on to it, before SIGKILL; and
// KillGrace how long SIGTERM gets before SIGKILL when pyobs ends a program
// itself (dump --kill, red -d, an error).
const (
	Grace     = 5 * time.Second
	KillGrace = 2 * time.Second
)

// Open resolves a Spec into a session. A spawned program that fails to
// become observable is ended before the error is returned: Open leaves no
// child behind.
func Open(ctx context.Context, spec Spec) (*Session, error) {
	for _, pid := range append([]int{spec.Pid}, spec.Set.Pids...) {
		if pid > 0 {
			if err := notThread(procfs.Default(), pid); err != nil {
				return nil, err
			}
		}
	}
	if spec.Set.Many() {
		if err := resolveSet(&spec); err != nil {
			return nil, err
		}
	}
	s, err := open(ctx, spec)
	if err != nil {
		return nil, err
	}
	s.Set = spec.Set
	return s, nil
}

func open(ctx context.Context, spec Spec) (*Session, error) {
	switch {
	case spec.Pid != 0 && len(spec.Argv) > 0:
		return nil, errors.New("give either a pid or a command, not both")
	case spec.Pid < 0:
		return nil, fmt.Errorf("invalid pid %d", spec.Pid)
	case spec.Pid > 0 && spec.Python == PythonOptional:
		s, pyErr, err := AttachAny(spec.Pid)
		if err != nil {
			return nil, err
		}
		s.PyErr = pyErr
		return s, nil
	case spec.Pid > 0:
		return Attach(spec.Pid)
	case len(spec.Argv) == 0:
		return nil, errors.New("no target: give a pid or a command")
	}
	if spec.Hold {
		return spawnHeld(spec.Argv, spec.Stdout)
	}
	s, err := spawn(spec.Argv, spec.Stdout)
	if err != nil {
		return nil, err
	}
	if spec.Python == PythonRequired {
		if err := s.WaitPython(ctx, spec.After); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, s.interrupted(ctx, spec.After)
			}
			s.Kill(KillGrace)
			return nil, err
		}
	}
	return s, nil
}

// End says how Finish ends a spawned program.
type End int

const (
	// Wait lets the program run to its end; when ctx ends first (pyobs got
	// SIGINT or SIGTERM) the signal is passed on to it, then SIGKILL after
	// Grace.
	Wait End = iota
	// Kill ends the program now (SIGTERM, KillGrace, SIGKILL).
	Kill
)

// Finish ends the observation of a spawned program and returns its exit
// status (128+signal when a signal ended it); for an attached process it
// returns 0 and leaves the process alone. Call it on every path after Open.
func (s *Session) Finish(ctx context.Context, end End) int {
	if s.hold != nil { // never released: it must not run unobserved
		s.Unhold()
		return s.ExitCode()
	}
	if s.adopted {
		return s.finishAdopted(ctx, end)
	}
	if s.cmd == nil {
		return 0
	}
	if end == Kill {
		s.Kill(KillGrace)
		return s.ExitCode()
	}
	select {
	case <-s.waited:
	case <-ctx.Done():
		s.endInterrupted(ctx)
	}
	return s.ExitCode()
}

// endInterrupted passes the signal that ended ctx on to the spawned
// program, and SIGKILLs it after Grace (interrupt.go).
func (s *Session) endInterrupted(ctx context.Context) {
	endInterrupted(InterruptSignal(ctx), s.Pid, func(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }, s.waited)
}

// interrupted ends a program whose wait for Python (and --after) ctx cut
// short, and says so.
func (s *Session) interrupted(ctx context.Context, after time.Duration) error {
	ran := time.Since(s.started)
	python := s.Py != nil && s.hasFrames()
	s.endInterrupted(ctx)
	return &InterruptedError{Signal: InterruptSignal(ctx), Pid: s.Pid, Code: s.ExitCode(), Ran: ran, After: after, Python: python}
}

// Running reports whether a spawned program is still running (false for
// an attached process: the session does not own its life).
func (s *Session) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.waited:
		return false
	default:
		return true
	}
}

// EndOnInterrupt ends a spawned program when ctx ends before it does
// (pyobs got SIGINT or SIGTERM): the signal is passed on, then SIGKILL
// after Grace. For engines that wait for the program themselves.
func (s *Session) EndOnInterrupt(ctx context.Context) {
	if s.cmd == nil {
		return
	}
	go func() {
		select {
		case <-s.waited:
			return
		case <-ctx.Done():
		}
		s.endInterrupted(ctx)
	}()
}
