// Package session owns the target: it attaches to a pid or spawns a command,
// checks that the target is a live user-space Python process we may read,
// and gives the engines what they need (threads, maps, the frame walker).
// Whatever happens, an attached target is left running: the session never
// stops it except inside Freeze/Thaw, and the kernel resumes seized threads
// if pyobs dies. A spawned one is ended when pyobs is told to stop (the
// signal passed on, SIGKILL after Grace: interrupt.go), never left behind.
//
// An engine that must see a spawned command from its first instruction
// (eBPF programs filtering by pid) opens it with Spec.Hold: the command is
// held before its exec, its pid known, until the engine calls Release
// (hold_linux.go; main calls HoldMain first thing).
//
// A -p PID target that execs is another program from there: Execed tells
// it (its memory layout in /proc/PID/stat changed since its interpreter
// was read), GuardCode keeps names of the new program out of a walker's
// symbolizer, and the engines end their run with the *ExecedError (exit
// status 3). Sets and spawned commands follow execs through procset.
package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/ptrace"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Errors the CLI maps to one line and an exit code.
var (
	ErrNoProcess    = procfs.ErrNoProcess
	ErrNotCgroup    = procfs.ErrNotCgroup
	ErrZombie       = errors.New("is a zombie (it exited; its parent has not reaped it): nothing to read")
	ErrKernelThread = errors.New("is a kernel thread: it has no user memory and no Python")
	ErrExited       = errors.New("exited while it was being read")
	// ErrReplaced: the target's memory map changed under the read (an
	// exec, or the interpreter's library unmapped): nothing to read there.
	ErrReplaced  = errors.New("replaced its memory (exec?) while it was being read")
	ErrNotPython = pyframes.ErrNotPython
)

// ThreadError: a -p value that is a thread of another process. A
// thread's id reaches its whole process in /proc, but the observers work on
// processes: the user is shown the process to give instead.
type ThreadError struct {
	Tid, Pid int
	Comm     string
}

func (e *ThreadError) Error() string {
	return fmt.Sprintf("%d is a thread of pid %d (%s), not a process: give -p %d", e.Tid, e.Pid, e.Comm, e.Pid)
}

// notThread refuses pid when it is a thread other than its process's main
// one (a zombie main thread included: the process is its leader's id).
func notThread(fs procfs.FS, pid int) error {
	tgid, err := fs.Tgid(pid)
	if err != nil || tgid == pid {
		return nil // gone or unreadable: the usual checks say so
	}
	comm := "?"
	if p, err := fs.Process(tgid); err == nil {
		comm = p.Comm
	}
	return &ThreadError{Tid: pid, Pid: tgid, Comm: comm}
}

// Session is one observed target.
type Session struct {
	Pid int
	FS  procfs.FS
	Py  *pyframes.Process
	// PyErr: with PythonOptional, why Py is nil (nil when it is open).
	PyErr error
	// Set: the processes observed besides Pid (zero: Pid alone). Engines
	// that observe sets seed internal/procset with Options().
	Set SetSpec

	cmd      *exec.Cmd
	waited   chan struct{}
	waitErr  error
	exitKids float64 // CPU seconds of the children a spawned target waited for, read at its exit

	adopted     bool // started by an engine (Adopt); waited for here once handed over
	adoptedCode int
	// adoptedSignal (AdoptWaiting): signals the program and what its
	// engine waits for with it.
	adoptedSignal func(syscall.Signal) error
	hold          *hold // Spec.Hold: the command waits for Release
	started       time.Time
	heldFor       time.Duration // Spec.Hold: from the holder's start to the release

	exec execWatch // -p PID: its program when its interpreter was read (Execed)
}

// Attach checks pid and finds its interpreter.
func Attach(pid int) (*Session, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("invalid pid %d", pid)
	}
	s := &Session{Pid: pid, FS: procfs.Default()}
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.openPython(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Session) check() error {
	p, err := s.FS.Process(s.Pid)
	if err != nil {
		return err
	}
	if p.Kernel {
		return fmt.Errorf("pid %d (%s) %w", s.Pid, p.Comm, ErrKernelThread)
	}
	if p.State == "Z" || p.State == "X" {
		return fmt.Errorf("pid %d (%s) %w", s.Pid, p.Comm, ErrZombie)
	}
	return nil
}

func (s *Session) openPython() error {
	s.watchExec()
	maps, err := pyframes.ReadMaps(s.Pid)
	if err != nil {
		return s.explain("read "+s.FS.Path(s.Pid, "maps"), err)
	}
	info, err := pyframes.FindRuntime(s.Pid, maps)
	if err != nil {
		if errors.Is(err, pyframes.ErrNotPython) {
			comm := ""
			if p, perr := s.FS.Process(s.Pid); perr == nil {
				comm = " (" + p.Comm + ")"
			}
			return fmt.Errorf("pid %d%s is %w", s.Pid, comm, errNotPythonShort)
		}
		return s.replaced(maps, s.explain("find the Python runtime", err))
	}
	py, err := pyframes.New(pyframes.NewProcessMemory(s.Pid), s.Pid, info)
	if err != nil {
		return s.replaced(maps, s.explain("read the Python runtime", err))
	}
	s.Py = py
	return nil
}

var errNotPythonShort = fmt.Errorf("%w", pyframes.ErrNotPython)

// explain turns EPERM into the gate that refused, and a vanished target into ErrExited.
func (s *Session) explain(op string, err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		// A refusal met while the target exec'd is the exec's, not a gate's.
		if xerr := s.Execed(); xerr != nil {
			return fmt.Errorf("%s of pid %d: %w (%v)", op, s.Pid, xerr, err)
		}
		return capability.ExplainPtrace(fmt.Sprintf("%s of pid %d", op, s.Pid), s.Pid, sameUID(s.Pid), err)
	}
	// ESRCH from process_vm_readv: the task is exiting (its memory is gone
	// before it becomes a zombie).
	if errors.Is(err, syscall.ESRCH) || !s.Alive() {
		return fmt.Errorf("pid %d %w: %v", s.Pid, ErrExited, err)
	}
	if errors.Is(err, pyframes.ErrNoInterpreter) {
		// Finalised, most often: the process is about to exit. Say so if
		// it does within a moment; else the interpreter is not (yet) there.
		for i := 0; i < 20 && s.Alive(); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if !s.Alive() {
			return fmt.Errorf("pid %d %w: %v", s.Pid, ErrExited, err)
		}
		return fmt.Errorf("%s of pid %d: %w", op, s.Pid, err)
	}
	// A read that failed as the target exec'd (its memory replaced under
	// it) is the exec's to report.
	if xerr := s.Execed(); xerr != nil {
		return fmt.Errorf("%s of pid %d: %w (%v)", op, s.Pid, xerr, err)
	}
	return err
}

// replaced turns a read of memory that the maps listed but that is gone
// (EFAULT) into ErrReplaced when the maps have changed since: an exec.
func (s *Session) replaced(before []pyframes.Mapping, err error) error {
	if !(errors.Is(err, syscall.EFAULT) || errors.Is(err, pyframes.ErrUnmapped)) || errors.Is(err, ErrExited) {
		return err
	}
	now, rerr := pyframes.ReadMaps(s.Pid)
	if rerr == nil && slices.Equal(before, now) {
		return err
	}
	return fmt.Errorf("pid %d %w: %v", s.Pid, ErrReplaced, err)
}

// Explain is explain for callers that read through the session's walker.
func (s *Session) Explain(op string, err error) error { return s.explain(op, err) }

func sameUID(pid int) bool {
	uid, err := procfs.Default().Owner(pid)
	return err == nil && uid == os.Geteuid()
}

// Alive reports whether the target still exists and a thread of it is
// alive (a zombie leader with live threads is alive: procfs.Process).
func (s *Session) Alive() bool {
	p, err := s.FS.Process(s.Pid)
	return err == nil && p.State != "Z" && p.State != "X"
}

// Spawn starts argv with the caller's stdio and returns once it runs; call
// WaitPython before reading it.
func Spawn(argv []string) (*Session, error) { return spawn(argv, nil) }

// spawn is Spawn with the program's stdout sent to stdout (nil: ours).
func spawn(argv []string, stdout *os.File) (*Session, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command after --")
	}
	if stdout == nil {
		stdout = os.Stdout
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, os.Stderr
	cmd.SysProcAttr = orphanKill()
	if err := cmd.Start(); err != nil {
		return nil, CommandError(argv[0], err)
	}
	s := &Session{Pid: cmd.Process.Pid, FS: procfs.Default(), cmd: cmd, waited: make(chan struct{}), started: time.Now()}
	go s.reap()
	return s, nil
}

// Spawned reports whether the session started the target.
func (s *Session) Spawned() bool { return s.cmd != nil }

// Started is when a spawned command began to run (a held one: its
// release); zero for an attached process. What ran before an engine was
// on is not in its results.
func (s *Session) Started() time.Time { return s.started }

// WaitPython polls until the spawned target's interpreter is up and its
// main thread runs Python code, then waits `after` more.
func (s *Session) WaitPython(ctx context.Context, after time.Duration) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for s.Py == nil || !s.hasFrames() {
		select {
		case <-s.waited:
			code := s.ExitCode()
			switch {
			case s.Py == nil && (lastErr == nil || errors.Is(lastErr, pyframes.ErrNotPython)):
				// A shell that ran python as a child, not by exec, ends here:
				// the command itself is the one waited for.
				return fmt.Errorf("pid %d exited (status %d) and never ran a Python interpreter (the command itself must become Python: a shell must exec python, not run it as a child): %w", s.Pid, code, ErrNotPython)
			case s.Py == nil:
				return fmt.Errorf("pid %d exited (status %d) before its interpreter could be read: %w", s.Pid, code, lastErr)
			}
			return &EndedError{Pid: s.Pid, Code: code, Before: "pyobs saw it run Python code"}
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if s.Py == nil {
			if err := s.openPython(); err != nil {
				// A read that failed because the program just exited says
				// nothing of what it ran: the last real answer stands.
				if !errors.Is(err, ErrExited) && !errors.Is(err, ErrNoProcess) {
					lastErr = err
				}
				var ge *capability.GateError
				var ue *pyframes.UnsupportedVersionError
				if errors.As(err, &ge) || errors.As(err, &ue) {
					return err
				}
			}
		}
	}
	select {
	case <-time.After(after):
	case <-s.waited:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (s *Session) hasFrames() bool {
	ts, err := s.Py.Threads(pyframes.Options{})
	if err != nil {
		return false
	}
	for _, t := range ts {
		if len(t.Frames) > 0 {
			return true
		}
	}
	return false
}

// Wait blocks until a spawned target exits.
func (s *Session) Wait(ctx context.Context) (int, error) {
	if s.cmd == nil {
		return 0, errors.New("not spawned")
	}
	select {
	case <-s.waited:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return s.ExitCode(), nil
}

// Exited is closed when a spawned target has exited.
func (s *Session) Exited() <-chan struct{} { return s.waited }

// ExitCode of a spawned target that has exited (128+signal when killed).
func (s *Session) ExitCode() int {
	if s.cmd == nil || s.cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		return StatusCode(ws)
	}
	return s.cmd.ProcessState.ExitCode()
}

// ExitCPU is the CPU seconds (user + system) of a spawned target that has
// exited and was reaped, from the kernel's account at its exit (its
// /proc/PID/stat is gone by then; wait4's rusage: the children it waited
// for included); ok false before that.
func (s *Session) ExitCPU() (float64, bool) {
	if s.cmd == nil {
		return 0, false
	}
	select {
	case <-s.waited:
	default:
		return 0, false
	}
	if s.cmd.ProcessState == nil {
		return 0, false
	}
	ru, ok := s.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, false
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, true
}

// ExitOwnCPU is ExitCPU without the children the target waited for
// (their CPU as its stat gave it while it was a zombie): the CPU of the
// target's own threads, which is what samplers of it count.
func (s *Session) ExitOwnCPU() (float64, bool) {
	c, ok := s.ExitCPU()
	if !ok {
		return 0, false
	}
	return max(0, c-s.exitKids), true
}

// reap waits for the spawned target's exit, reads its children's CPU from
// its stat while it is a zombie (for ExitOwnCPU), and reaps it.
func (s *Session) reap() {
	waitExited(s.Pid)
	if st, err := s.FS.Stat(s.Pid); err == nil {
		s.exitKids = float64(st.CUTimeTicks+st.CSTimeTicks) / procfs.UserHZ
	}
	s.waitErr = s.cmd.Wait()
	close(s.waited)
}

// StatusCode is a wait status as a shell reports it: the exit code, or
// 128+N when signal N ended the process.
func StatusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// Kill ends a spawned target (SIGTERM, then SIGKILL after a grace period).
func (s *Session) Kill(grace time.Duration) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.waited:
	case <-time.After(grace):
		_ = s.cmd.Process.Kill()
		<-s.waited
	}
}

// Freeze stops every thread of the target (PTRACE_SEIZE + INTERRUPT).
func (s *Session) Freeze() (*ptrace.Frozen, error) {
	tids, err := s.FS.Tasks(s.Pid)
	if err != nil {
		return nil, s.explain("list threads", err)
	}
	f, err := ptrace.Freeze(s.Pid, tids)
	if err != nil {
		return nil, s.explain("stop threads", err)
	}
	return f, nil
}

// Errors of the layers below, named here so that commands map them to exit
// codes without importing those layers.
type (
	// UnsupportedVersionError: a CPython version pyobs does not read.
	UnsupportedVersionError = pyframes.UnsupportedVersionError
	// GateError: a kernel gate (capability, sysctl, LSM) refused.
	GateError = capability.GateError
)
