package session

import (
	"fmt"
	"syscall"

	"github.com/pyobs/pyobs/internal/procfs"
)

// AttachAny is Attach for commands that do not need the frame walker (stat):
// the pid must be a live user-space process, but it need not be Python.
// When the interpreter can't be read, s.Py stays nil and the reason is
// returned as pyErr (nil when the walker is ready).
func AttachAny(pid int) (s *Session, pyErr error, err error) {
	if pid <= 0 {
		return nil, nil, fmt.Errorf("invalid pid %d", pid)
	}
	s = &Session{Pid: pid, FS: procfs.Default()}
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	if perr := s.openPython(); perr != nil {
		s.Py = nil
		return s, perr, nil
	}
	return s, nil, nil
}

// TryPython opens the frame walker if it is not open yet (a spawned target
// has no interpreter until it has started); it reports whether s.Py is set.
func (s *Session) TryPython() bool {
	if s.Py != nil {
		return true
	}
	if err := s.openPython(); err != nil {
		s.Py = nil
		return false
	}
	return true
}

// ThreadNames maps kernel TIDs to Python threading names, best effort:
// nil when the walker is not open or the read fails. Each name comes with
// the TID its Thread object recorded (pyframes.ThreadNames).
func (s *Session) ThreadNames() map[int]string {
	if s.Py == nil {
		return nil
	}
	threads, err := s.Py.ThreadNames()
	if err != nil {
		return nil
	}
	ns := s.hostTids()
	out := map[int]string{}
	for _, t := range threads {
		tid := t.NativeID
		if ns != nil {
			tid = ns[tid]
		}
		if tid > 0 && t.Name != "" {
			out[tid] = t.Name
		}
	}
	return out
}

// Rusage is the spawned target's resource usage as wait4 returned it
// (itself and the children it waited for), once it has exited; nil before.
func (s *Session) Rusage() *syscall.Rusage {
	if s.cmd == nil || s.cmd.ProcessState == nil {
		return nil
	}
	ru, _ := s.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return ru
}
