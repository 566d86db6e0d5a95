package session

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// ErrExeced: the one process observed (-p PID) exec'd a new program: the
// memory pyobs was reading is gone. It is a replacement of its memory
// (errors.Is ErrReplaced: exit status 3).
var ErrExeced = fmt.Errorf("exec'd a new program: %w", ErrReplaced)

// ExecedError says what the target became. Engines end their run with it
// and return what they gathered before the exec.
type ExecedError struct {
	Pid  int
	Was  string // the command line read at the start
	Argv []string
}

func (e *ExecedError) Error() string {
	return fmt.Sprintf("pid %d exec'd a new program (now %s; was %s): its memory replaced, the run ended at the exec with what was read before it; nothing after it is named", e.Pid, e.Now(), procset.ShortArgv([]string{e.Was}, nowMax))
}

// Now is the command line of the program it became, on one line, its
// control characters escaped, cut at nowMax characters ("…"): a python -c
// script would otherwise fill a screen in every message.
func (e *ExecedError) Now() string {
	if len(e.Argv) == 0 {
		return "(its command line unreadable)"
	}
	return procset.ShortArgv(e.Argv, nowMax)
}

const nowMax = 120

func (e *ExecedError) Unwrap() error { return ErrExeced }

// execWatch is the session's account of its target's program.
type execWatch struct {
	mu     sync.Mutex
	mm     procfs.MemLayout
	ok     bool
	was    string
	execed *ExecedError
	looked time.Time // Execed's last read
}

// watchExec notes the target's memory layout before its interpreter is
// read: an exec after this is a new program (Execed).
func (s *Session) watchExec() {
	s.exec.mu.Lock()
	defer s.exec.mu.Unlock()
	s.exec.mm, s.exec.ok = s.FS.MemLayout(s.Pid)
	if argv, err := s.FS.Cmdline(s.Pid); err == nil {
		s.exec.was = procset.ShortArgv(argv, nowMax)
	}
}

// Execed reports (an *ExecedError) whether the one process observed with
// -p PID has exec'd since its interpreter was read; nil while it runs the
// same program, when it is gone (an exit is said elsewhere), and for a
// spawned command or a set (internal/procset follows their execs). One
// read of /proc/PID/stat; once seen, the answer stays.
func (s *Session) Execed() error {
	if s.cmd != nil || s.Set.Many() {
		return nil
	}
	s.exec.mu.Lock()
	defer s.exec.mu.Unlock()
	if s.exec.execed != nil {
		return s.exec.execed
	}
	if !s.exec.ok {
		return nil
	}
	s.exec.looked = time.Now()
	now, ok := s.FS.MemLayout(s.Pid)
	if !ok || now == s.exec.mm {
		return nil
	}
	e := &ExecedError{Pid: s.Pid, Was: s.exec.was}
	// Seen in the middle of the exec, the new program's arguments are not
	// in place yet: a moment later they are.
	for i := 0; i < 20; i++ {
		if e.Argv, _ = s.FS.Cmdline(s.Pid); len(e.Argv) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.exec.execed = e
	return e
}

// ExecedWithin is Execed for a loop that wakes often: /proc is read only
// when the last look is older than d (nil until then).
func (s *Session) ExecedWithin(d time.Duration) error {
	s.exec.mu.Lock()
	recent := s.exec.execed == nil && time.Since(s.exec.looked) < d
	s.exec.mu.Unlock()
	if recent {
		return nil
	}
	return s.Execed()
}

// GuardCode wraps a reader of the target's code objects so that no name
// is read from another program: each read is followed by Execed, and a
// read after the exec (or one the exec may have raced) fails with the
// ExecedError. A name it returns was read from the program sampled. (One
// read of /proc/PID/stat per code object read: the symbolizers call it on
// a cache miss or re-check only.)
func (s *Session) GuardCode(r CodeReader) CodeReader {
	if s.cmd != nil || s.Set.Many() {
		return r
	}
	return execGuard{r: r, s: s}
}

// CodeReader reads one code object's names (pyframes.Process.Code).
type CodeReader interface {
	Code(addr uint64) (*pyframes.CodeSymbol, error)
}

type execGuard struct {
	r CodeReader
	s *Session
}

func (g execGuard) Code(addr uint64) (*pyframes.CodeSymbol, error) {
	// One look, after the read: an exec before it is seen then too.
	c, err := g.r.Code(addr)
	if xerr := g.s.Execed(); xerr != nil {
		return nil, xerr
	}
	return c, err
}

// IsExeced says whether err is (or wraps) the target's exec.
func IsExeced(err error) bool { return errors.Is(err, ErrExeced) }
