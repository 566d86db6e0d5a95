package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Holding a command before its exec (Spec.Hold), for engines that must
// observe it from its first instruction: Open starts pyobs itself
// (/proc/self/exe) as a tiny holder whose pid is the command's pid to be.
// The holder blocks reading a pipe; the engine loads and attaches its
// programs, seeds the pid (internal/procset), then calls Release: the
// holder reads one byte and execs the command (same pid, same stdio).
// An exec that fails (no such command, not executable) is written back on
// a second pipe (close-on-exec in the holder: a successful exec closes it
// empty), and Release returns an *ExecError (exit status 127 when there
// is no such command, 126 when it cannot be executed, as env(1)).
// If pyobs dies while holding, the holder reads EOF and exits without
// running the command; Unhold lets it go the same way, quietly (an engine
// that fell back to one that spawns the command itself).
//
// The holder runs as soon as main starts: main calls HoldMain first thing
// (before flags), and in a normal run HoldMain returns at once.

// holdEnv names the holder's two inherited descriptors: "RELEASE,ERRORS".
const holdEnv = "PYOBS_HOLD_FDS"

// Bytes on the release pipe.
const (
	holdRun  = 'x' // exec the command
	holdQuit = 'q' // exit quietly without running it
)

// hold is a held command's side in pyobs.
type hold struct {
	release *os.File // write end: one byte releases
	errs    *os.File // read end: the holder's exec error, if any
	argv0   string
	argv    []string
	since   time.Time // the holder's start
}

// The holder must exec from its main thread, the thread group's leader:
// an exec from another thread ends the leader (de_thread), which the
// kernel reports as the leader's exit (sched_process_exit with pid ==
// tgid) and internal/procset takes for the process's. Locking the OS
// thread in an init makes main run on the main thread.
func init() {
	if _, ok := os.LookupEnv(holdEnv); ok {
		runtime.LockOSThread()
	}
}

// HoldMain is the holder: when pyobs was started as one (holdEnv set), it
// waits for its release and execs its arguments, and never returns;
// otherwise it returns at once. Call it first thing in main.
func HoldMain() {
	fds, ok := os.LookupEnv(holdEnv)
	if !ok {
		return
	}
	_ = os.Unsetenv(holdEnv)
	var rfd, efd int
	if _, err := fmt.Sscanf(fds, "%d,%d", &rfd, &efd); err != nil {
		fmt.Fprintf(os.Stderr, "pyobs: can't hold the command: bad %s=%q\n", holdEnv, fds)
		os.Exit(127)
	}
	syscall.CloseOnExec(rfd)
	syscall.CloseOnExec(efd)
	fail := func(err error) {
		xe := holderError(0, "", holderMessage(err))
		_, _ = syscall.Write(efd, []byte(holderMessage(err)))
		os.Exit(xe.Code())
	}
	if len(os.Args) == 0 {
		fail(errors.New("no command"))
	}
	var b [1]byte
	for {
		n, err := syscall.Read(rfd, b[:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if n == 1 && b[0] == holdRun {
			break
		}
		if n == 1 && b[0] == holdQuit {
			os.Exit(0)
		}
		// EOF (pyobs is gone) or an error: the command must not run unobserved.
		fmt.Fprintf(os.Stderr, "pyobs: the observer ended before releasing %s: not run\n", os.Args[0])
		os.Exit(127)
	}
	_ = syscall.Close(rfd)
	path, err := exec.LookPath(os.Args[0])
	if err != nil {
		fail(err)
	}
	fail(syscall.Exec(path, os.Args, os.Environ()))
}

// spawnHeld starts the holder for argv; the session's pid is the
// command's. Stdout as spawn's.
func spawnHeld(argv []string, stdout *os.File) (*Session, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command after --")
	}
	if stdout == nil {
		stdout = os.Stdout
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("can't hold %s: pipe: %w", argv[0], err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		_ = rr.Close()
		_ = rw.Close()
		return nil, fmt.Errorf("can't hold %s: pipe: %w", argv[0], err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, holdEnv+"=") {
			env = append(env, kv)
		}
	}
	// ExtraFiles are the child's fds 3 and 4.
	env = append(env, holdEnv+"=3,4")
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: argv, Env: env, ExtraFiles: []*os.File{rr, ew}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, os.Stderr
	cmd.SysProcAttr = orphanKill()
	err = cmd.Start()
	_ = rr.Close()
	_ = ew.Close()
	if err != nil {
		_ = rw.Close()
		_ = er.Close()
		return nil, fmt.Errorf("can't start the holder of %s: %w", argv[0], err)
	}
	s := &Session{Pid: cmd.Process.Pid, FS: procfs.Default(), cmd: cmd, waited: make(chan struct{}),
		hold: &hold{release: rw, errs: er, argv0: argv[0], argv: argv, since: time.Now()}}
	go s.reap()
	return s, nil
}

// Held reports whether the session's command is held before its exec
// (Spec.Hold, not yet released).
func (s *Session) Held() bool { return s.hold != nil }

// HeldFor is how long a released command waited before its exec (the
// engine's load and attach): its start was delayed that much.
func (s *Session) HeldFor() time.Duration { return s.heldFor }

// HeldLayout reads the in-kernel walker's layout of the interpreter a
// held command will run from its files, as its exec will find them (the
// holder's PATH and environment are pyobs's): pyframes.CommandLayout.
// path is the file read. An engine loads its program with the layout
// fixed and checks it against the interpreter that comes up.
func (s *Session) HeldLayout() (l *pyframes.KernelLayout, path string, err error) {
	if s.hold == nil {
		return nil, "", fmt.Errorf("pid %d: not a command held before its exec", s.Pid)
	}
	return pyframes.CommandLayout(s.hold.argv, os.Environ())
}

// Release lets a held command exec and returns once it has (or could
// not: an *ExecError, status 127 or 126). A session that is not held: nil.
func (s *Session) Release() error {
	h := s.hold
	if h == nil {
		return nil
	}
	s.hold = nil
	defer h.errs.Close()
	s.started = time.Now()
	s.heldFor = s.started.Sub(h.since)
	_, err := h.release.Write([]byte{holdRun})
	_ = h.release.Close()
	if err != nil {
		return fmt.Errorf("can't release %s (pid %d): %w", h.argv0, s.Pid, err)
	}
	msg, _ := io.ReadAll(h.errs) // EOF at the exec (close-on-exec) or the holder's exit
	if len(msg) > 0 {
		<-s.waited
		return holderError(s.Pid, h.argv0, string(msg))
	}
	return nil
}

// Unhold lets a held command go without running it (the holder exits
// with status 0) and waits for its end; the session is then over.
func (s *Session) Unhold() {
	h := s.hold
	if h == nil {
		return
	}
	s.hold = nil
	_, _ = h.release.Write([]byte{holdQuit})
	_ = h.release.Close()
	_ = h.errs.Close()
	<-s.waited
}

// orphanKill makes a program pyobs spawns die with pyobs (SIGKILL when
// the thread that started it exits: pyobs killed, even by SIGKILL), so
// that no -- CMD outlives the observation. It is the forking OS thread's
// death that counts: no goroutine of pyobs exits with its thread locked
// but the ptrace tracer's, whose own children it starts itself.
func orphanKill() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
