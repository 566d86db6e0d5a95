package remoteexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// Options of one request.
type Options struct {
	Source []byte // the Python source to run
	Name   string // its file name in tracebacks
	// Globals are extra str variables of the source's globals.
	Globals map[string]string
	// Tid: the thread that runs it (0: the main thread).
	Tid int
	// AnyThread (with Tid 0): when the main thread has not taken the
	// request after a moment, move it to a thread that runs now.
	AnyThread bool
	// Timeout: how long the thread may take to reach a safe point.
	Timeout time.Duration
	// Nudge: when the thread has not started the script after NudgeAfter,
	// send it NudgeSignal (0: pick one the target catches that is harmless
	// by convention) to interrupt the syscall it is blocked in.
	Nudge       bool
	NudgeSignal syscall.Signal
	NudgeAfter  time.Duration
}

// Result of a request that ran.
type Result struct {
	Tid       int           // the thread that ran it
	moved     bool          // AnyThread moved the request once
	Output    []byte        // what the source wrote to sys.stdout/sys.stderr
	Exception string        // "" or the exception's type name
	Traceback string        // the formatted traceback of Exception
	Started   time.Duration // from the request to the safe point
	Ran       time.Duration // from the safe point to the end
	Nudged    string        // the signal sent, if one was
}

// SafePointError: the thread never took the request.
type SafePointError struct {
	Pid, Tid int
	Timeout  time.Duration
	Where    string // "blocked in read", "running native code", …
	Nudged   string
	Running  []int  // other Python threads running when it timed out (--tid candidates)
	Stopped  string // its /proc state when stopped by someone else (T, t): no nudge helps
}

func (e *SafePointError) Error() string {
	if e.Stopped != "" {
		return fmt.Sprintf("pid %d thread %d never reached a safe point within %v: it is stopped (state %s: job control or a tracer), the request is withdrawn; resume it (SIGCONT, or detach its tracer) and run exec again", e.Pid, e.Tid, e.Timeout, e.Stopped)
	}
	s := fmt.Sprintf("pid %d thread %d never reached a safe point within %v (%s?); the request is withdrawn", e.Pid, e.Tid, e.Timeout, e.Where)
	if e.Nudged != "" {
		return s + " (" + e.Nudged + " sent did not bring it back to the eval loop)"
	}
	s += "; --nudge interrupts a blocking syscall with a signal the target catches"
	if len(e.Running) > 0 {
		ids := make([]string, len(e.Running))
		for i, id := range e.Running {
			ids[i] = strconv.Itoa(id)
		}
		s += "; or --tid one of the Python threads running now: " + strings.Join(ids, ", ")
	}
	return s
}

// Channel is a directory in the target's /tmp (as the target sees it)
// that only the target's user can enter, for scripts and their reports.
type Channel struct {
	s        *session.Session
	mem      *pyframes.ProcessMemory
	lock     *os.File // flock(LOCK_EX) held while pyobs lives
	host     string   // the directory through /proc/PID/root
	target   string   // the same directory as the target names it
	uid, gid int
	n        int
	// dir, parent: the directory and the one that holds it, held open:
	// once the target exits /proc/PID/root resolves no more, and the
	// channel is removed through them.
	dir, parent *os.File
}

// Open checks the target can take a request and makes its channel.
func Open(s *session.Session) (*Channel, error) {
	if s.Py == nil {
		return nil, fmt.Errorf("pid %d: no Python interpreter open", s.Pid)
	}
	if v := s.Py.Version(); v.Minor < 14 {
		return nil, fmt.Errorf("pid %d runs Python %s: %w", s.Pid, v, ErrUnsupported)
	}
	if err := checkBuild(s); err != nil {
		return nil, err
	}
	mem := pyframes.NewProcessMemory(s.Pid)
	if _, err := Locate(mem, s.Pid, s.Py.Info.Runtime, 0); err != nil && !errors.Is(err, ErrNoMain) {
		_ = mem.Close()
		return nil, err
	}
	st, err := s.FS.Status(s.Pid)
	if err != nil {
		_ = mem.Close()
		return nil, err
	}
	uid, gid := idField(st.Fields["Uid"]), idField(st.Fields["Gid"])
	if uid < 0 || gid < 0 {
		_ = mem.Close()
		return nil, fmt.Errorf("pid %d: can't read its user from %s", s.Pid, s.FS.Path(s.Pid, "status"))
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	c := &Channel{s: s, mem: mem, uid: uid, gid: gid, target: "/tmp/pyobs-exec-" + hex.EncodeToString(rnd[:])}
	c.host = s.FS.RootPath(s.Pid, c.target)
	if err := os.Mkdir(c.host, 0o700); err != nil {
		_ = mem.Close()
		return nil, fmt.Errorf("can't create %s for pid %d: %w", c.host, s.Pid, err)
	}
	if err := os.Chown(c.host, uid, gid); err != nil {
		_ = os.Remove(c.host)
		_ = mem.Close()
		return nil, fmt.Errorf("can't give %s to uid %d: %w", c.host, uid, err)
	}
	c.dir, _ = os.Open(c.host)
	c.parent, _ = os.Open(filepath.Dir(c.host))
	// The lock pyobs holds while it lives: a script that starts after
	// pyobs died (killed before it could withdraw the request) finds it
	// free and runs nothing.
	if err := c.create("lock", nil); err != nil {
		_ = c.Close()
		return nil, err
	}
	lk, err := os.Open(c.HostPath("lock"))
	if err == nil {
		err = unix.Flock(int(lk.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("can't lock %s: %w", c.HostPath("lock"), err)
	}
	c.lock = lk
	return c, nil
}

// idField is the filesystem id (the fourth) of a status Uid/Gid line: the
// one the kernel checks when the target opens a file.
func idField(s string) int {
	f := strings.Fields(s)
	if len(f) < 4 {
		return -1
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return -1
	}
	return n
}

// Close removes the channel and everything in it: through its path, or,
// when the target has exited (its /proc/PID/root gone), through the
// directories held open.
func (c *Channel) Close() error {
	_ = c.mem.Close()
	err := os.RemoveAll(c.host)
	if c.dir != nil && c.parent != nil {
		if names, lerr := c.dir.Readdirnames(-1); lerr == nil {
			for _, n := range names {
				_ = unix.Unlinkat(int(c.dir.Fd()), n, 0)
			}
		}
		if uerr := unix.Unlinkat(int(c.parent.Fd()), filepath.Base(c.host), unix.AT_REMOVEDIR); uerr == nil || errors.Is(uerr, unix.ENOENT) {
			err = nil
		}
	}
	for _, f := range []*os.File{c.lock, c.dir, c.parent} {
		if f != nil {
			_ = f.Close()
		}
	}
	return err
}

// HostPath is name inside the channel, as pyobs opens it.
func (c *Channel) HostPath(name string) string { return filepath.Join(c.host, name) }

// TargetPath is name inside the channel, as the target opens it.
func (c *Channel) TargetPath(name string) string { return filepath.Join(c.target, name) }

// Mkfifo makes a named pipe in the channel owned by the target's user.
func (c *Channel) Mkfifo(name string) error {
	p := c.HostPath(name)
	if err := unix.Mkfifo(p, 0o600); err != nil {
		return fmt.Errorf("can't make fifo %s: %w", p, err)
	}
	if err := os.Chown(p, c.uid, c.gid); err != nil {
		return fmt.Errorf("can't give %s to uid %d: %w", p, c.uid, err)
	}
	return nil
}

func (c *Channel) create(name string, data []byte) error {
	p := c.HostPath(name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("can't create %s: %w", p, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chown(c.uid, c.gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("can't write %s: %w", p, err)
	}
	return nil
}

// Run sends one request and waits until the script has run (or the thread
// never reached a safe point within opt.Timeout, or ctx ends).
func (c *Channel) Run(ctx context.Context, opt Options) (*Result, error) {
	s := c.s
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	mem := c.mem
	t, err := Locate(mem, s.Pid, s.Py.Info.Runtime, opt.Tid)
	// A program just started: wait (within the timeout) for its __main__.
	for wait := time.Now(); errors.Is(err, ErrNoMain) && time.Since(wait) < opt.Timeout && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
		t, err = Locate(mem, s.Pid, s.Py.Info.Runtime, opt.Tid)
	}
	if err != nil {
		return nil, err
	}
	sig := opt.NudgeSignal
	if opt.Nudge && sig == 0 {
		if sig, err = harmlessSignal(s.FS, s.Pid); err != nil {
			return nil, err
		}
	} else if opt.Nudge {
		if err := CheckNudgeSignal(s.FS, s.Pid, sig); err != nil {
			return nil, err
		}
	}
	c.n++
	run, body := fmt.Sprintf("run-%d.py", c.n), fmt.Sprintf("body-%d.py", c.n)
	out, done := fmt.Sprintf("out-%d", c.n), fmt.Sprintf("done-%d", c.n)
	name := opt.Name
	if name == "" {
		name = "<pyobs exec>"
	}
	src := wrapperSource(c.TargetPath(body), c.TargetPath("lock"), c.TargetPath(out), c.TargetPath(done), name, opt.Source, opt.Globals)
	if err := c.create(body, []byte(src)); err != nil {
		return nil, err
	}
	if err := c.create(run, []byte(trampolineSource(c.TargetPath(body)))); err != nil {
		return nil, err
	}
	if len(c.TargetPath(run)) >= t.PathSize {
		return nil, fmt.Errorf("script path %s is longer than the target's %d-byte buffer", c.TargetPath(run), t.PathSize-1)
	}
	// A request already pending (another debugger, or ours withdrawn too
	// late) would be overwritten: refuse rather than race it.
	var cur [4]byte
	if err := mem.Read(t.Pending, cur[:]); err != nil {
		return nil, fmt.Errorf("can't read debugger_pending_call of pid %d tid %d at 0x%x: %w", s.Pid, t.Tid, t.Pending, err)
	}
	if le32(cur[:]) != 0 {
		return nil, fmt.Errorf("pid %d thread %d already has a remote-debugger request pending (another debugger?): not overwriting it", s.Pid, t.Tid)
	}
	start := time.Now()
	if err := request(s.Pid, mem, t, c.TargetPath(run)); err != nil {
		return nil, s.Explain("write the remote-debugger request", err)
	}
	res := &Result{Tid: t.Tid}
	hostBody := c.HostPath(body)
	gone := func() bool { _, err := os.Stat(hostBody); return errors.Is(err, os.ErrNotExist) }
	nudgeAt := opt.NudgeAfter
	if nudgeAt <= 0 {
		nudgeAt = min(opt.Timeout/4, 500*time.Millisecond)
	}
	moveAt := min(opt.Timeout/4, 300*time.Millisecond)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var taken time.Time
	// Phase 1: the safe point (the wrapper removes its file when it starts).
	for !gone() {
		el := time.Since(start)
		// The thread clears the flag, then runs the script, whose first
		// act is to remove its file: a flag cleared long before that means
		// the script never ran (an audit hook refused it, or it failed).
		var pend [4]byte
		if mem.Read(t.Pending, pend[:]) == nil && le32(pend[:]) == 0 {
			if taken.IsZero() {
				taken = time.Now()
			} else if time.Since(taken) > 500*time.Millisecond && !gone() {
				_ = os.Remove(hostBody)
				return nil, fmt.Errorf("pid %d thread %d took the request but did not run the script (an audit hook refused it, or it failed to compile: the target's stderr says)", s.Pid, t.Tid)
			}
		} else {
			taken = time.Time{}
		}
		// AnyThread: the chosen thread is not coming; one that runs Python
		// now will. Withdraw, then ask that one (a late start of the
		// first is seen by the withdrawal; a second run finds no file).
		if opt.AnyThread && !res.moved && el >= moveAt && opt.Tid == 0 {
			if cands := running(s.FS, s.Pid, t); len(cands) > 0 {
				res.moved = true
				if c.withdraw(mem, t, hostBody) {
					break
				}
				nt, err := Locate(mem, s.Pid, s.Py.Info.Runtime, cands[0])
				if err == nil && mem.Read(nt.Pending, pend[:]) == nil && le32(pend[:]) == 0 {
					t = nt
				}
				if err := request(s.Pid, mem, t, c.TargetPath(run)); err != nil {
					return nil, s.Explain("write the remote-debugger request", err)
				}
				res.Tid, taken = t.Tid, time.Time{}
			}
		}
		if opt.Nudge && res.Nudged == "" && el >= nudgeAt {
			if err := unix.Tgkill(s.Pid, t.Tid, sig); err != nil {
				return nil, fmt.Errorf("can't send %v to pid %d tid %d: %w", sig, s.Pid, t.Tid, err)
			}
			res.Nudged = unix.SignalName(sig)
		}
		if el >= opt.Timeout || ctx.Err() != nil {
			if c.withdraw(mem, t, hostBody) {
				break
			}
			_ = os.Remove(hostBody)
			if !s.Alive() {
				return nil, fmt.Errorf("pid %d %w while waiting for its safe point", s.Pid, session.ErrExited)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("pid %d thread %d: interrupted before the safe point; the request is withdrawn: %w", s.Pid, t.Tid, ctx.Err())
			}
			return nil, &SafePointError{Pid: s.Pid, Tid: t.Tid, Timeout: opt.Timeout, Where: where(s.FS, s.Pid, t.Tid), Nudged: res.Nudged, Running: running(s.FS, s.Pid, t),
				Stopped: s.FS.TaskStopped(s.Pid, t.Tid)}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	res.Started = time.Since(start)
	// Phase 2: the script runs; its end is the done file.
	hostDone := c.HostPath(done)
	for {
		b, err := readNoFollow(hostDone)
		if err == nil {
			res.Ran = time.Since(start) - res.Started
			res.Output, _ = readNoFollow(c.HostPath(out))
			st := string(b)
			if rest, ok := strings.CutPrefix(st, "exception "); ok {
				res.Exception, res.Traceback, _ = strings.Cut(rest, "\n")
			}
			return res, nil
		}
		if !s.Alive() {
			return nil, fmt.Errorf("pid %d %w while running the script", s.Pid, session.ErrExited)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("pid %d thread %d: %w while the script runs in the target (it goes on; its output is lost)", s.Pid, t.Tid, context.Cause(ctx))
		}
	}
}

// request writes the path, the pending flag, then the eval-breaker bit, in
// the order PEP 768 gives (the flag before the bit the thread checks).
func request(pid int, mem pyframes.Memory, t *Target, path string) error {
	b := append([]byte(path), 0)
	if err := write(pid, t.Path, b); err != nil {
		return err
	}
	if err := write(pid, t.Pending, []byte{1, 0, 0, 0}); err != nil {
		return err
	}
	return orBreaker(pid, mem, t)
}

// orBreaker sets the bit: read, OR, write, as sys.remote_exec does (the
// target ORs atomically; a bit it set between our read and write would be
// lost, so the word is re-read and the write repeated until it holds).
func orBreaker(pid int, mem pyframes.Memory, t *Target) error {
	var b [8]byte
	for i := 0; i < 8; i++ {
		if err := mem.Read(t.EvalBreaker, b[:]); err != nil {
			return fmt.Errorf("can't read eval_breaker of pid %d tid %d at 0x%x: %w", pid, t.Tid, t.EvalBreaker, err)
		}
		v := le64(b[:])
		if v&EvalPleaseStopBit != 0 {
			return nil
		}
		v |= EvalPleaseStopBit
		for j := range b {
			b[j] = byte(v >> (8 * j))
		}
		if err := write(pid, t.EvalBreaker, b[:]); err != nil {
			return err
		}
	}
	return nil
}

// withdraw clears a pending request that the thread has not taken. It
// reports whether the script started after all (the race with the
// thread's own clearing of the flag).
func (c *Channel) withdraw(mem pyframes.Memory, t *Target, hostBody string) bool {
	var cur [4]byte
	if mem.Read(t.Pending, cur[:]) == nil && le32(cur[:]) == 1 {
		_ = write(c.s.Pid, t.Pending, []byte{0, 0, 0, 0})
	}
	time.Sleep(50 * time.Millisecond)
	_, err := os.Stat(hostBody)
	return errors.Is(err, os.ErrNotExist)
}

// readNoFollow reads a file of the channel, which the target's user owns:
// never through a link it may have planted there.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func write(pid int, addr uint64, b []byte) error {
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	n, err := unix.ProcessVMWritev(pid, local, remote, 0)
	if err != nil {
		return fmt.Errorf("can't write pid %d memory at 0x%x (%d bytes): %w", pid, addr, len(b), err)
	}
	if n != len(b) {
		return fmt.Errorf("can't write pid %d memory at 0x%x: wrote %d of %d bytes", pid, addr, n, len(b))
	}
	return nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// where says what a thread that ignores the request is doing.
func where(fs procfs.FS, pid, tid int) string {
	sc, err := fs.TaskSyscall(pid, tid)
	if err != nil {
		return "state unknown"
	}
	switch {
	case sc.Nr >= 0:
		return "blocked in " + procfs.SyscallName(sc.Nr)
	case sc.Nr == -1:
		return "running native code that does not return to the eval loop"
	}
	return "state unknown"
}

// running lists the interpreter's other threads that are on a CPU or
// runnable now, or running in user space.
func running(fs procfs.FS, pid int, t *Target) []int {
	var out []int
	for _, id := range t.Threads {
		if id == t.Tid {
			continue
		}
		if st, err := fs.TaskStat(pid, id); err == nil && st.State == "R" {
			out = append(out, id)
		}
	}
	return out
}

// harmlessByConvention: signals whose default action is to do nothing, so a
// handler the program installed for them must expect spurious ones.
var harmlessByConvention = []syscall.Signal{unix.SIGWINCH, unix.SIGURG, unix.SIGCHLD, unix.SIGCONT}

// harmlessSignal picks a signal the target catches (only a caught signal
// interrupts a blocking syscall: an ignored or default-ignored one is
// dropped by the kernel) among those harmless by convention.
func harmlessSignal(fs procfs.FS, pid int) (syscall.Signal, error) {
	st, err := fs.Status(pid)
	if err != nil {
		return 0, err
	}
	for _, sg := range harmlessByConvention {
		if st.SigCgt&(1<<(uint(sg)-1)) != 0 {
			return sg, nil
		}
	}
	return 0, fmt.Errorf("pid %d catches none of SIGWINCH, SIGURG, SIGCHLD, SIGCONT (caught: %s): no signal would interrupt its syscall harmlessly (CPython catches only SIGINT, raising KeyboardInterrupt); name one with --nudge-signal to send it anyway", pid, caught(st.SigCgt))
}

// CheckNudgeSignal refuses a nudge signal the target does not catch: KILL
// and STOP can't be caught at all, and any other uncaught signal either takes
// its default action (for most, ending or stopping the target: pyobs would
// have killed it) or is ignored and interrupts nothing.
func CheckNudgeSignal(fs procfs.FS, pid int, sig syscall.Signal) error {
	name := unix.SignalName(sig)
	if name == "" {
		name = "signal " + strconv.Itoa(int(sig))
	}
	if sig == unix.SIGKILL || sig == unix.SIGSTOP {
		return fmt.Errorf("%s can't be caught: it would %s the target (pid %d), not interrupt its syscall", name,
			map[bool]string{true: "kill", false: "stop"}[sig == unix.SIGKILL], pid)
	}
	st, err := fs.Status(pid)
	if err != nil {
		return err
	}
	if st.SigCgt&(1<<(uint(sig)-1)) == 0 {
		return fmt.Errorf("pid %d does not catch %s (caught: %s): sent, it would take its default action (end or stop the target, or nothing) instead of interrupting a syscall", pid, name, caught(st.SigCgt))
	}
	return nil
}

func caught(mask uint64) string {
	var out []string
	for i := 1; i <= 64; i++ {
		if mask&(1<<(i-1)) != 0 {
			n := unix.SignalName(syscall.Signal(i))
			if n == "" {
				n = "signal " + strconv.Itoa(i)
			}
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// auditEvent is in .rodata of every build compiled with remote-debugging
// support (Python/ceval_gil.c raises it before running a script), and in no
// build without (--without-remote-debug).
var auditEvent = []byte("cpython.remote_debugger_script\x00")

// checkBuild refuses an interpreter built without remote-debugging support.
func checkBuild(s *session.Session) error {
	path := s.FS.RootPath(s.Pid, s.Py.Info.Binary)
	f, err := elf.Open(path)
	if err != nil {
		return nil // unreadable: the protocol itself will tell
	}
	defer f.Close()
	for _, sec := range f.Sections {
		if sec.Name != ".rodata" {
			continue
		}
		b, err := sec.Data()
		if err != nil {
			return nil
		}
		if !bytes.Contains(b, auditEvent) {
			return fmt.Errorf("pid %d: %s was built without remote-debugging support (--without-remote-debug): %w", s.Pid, s.Py.Info.Binary, ErrUnsupported)
		}
		return nil
	}
	return nil
}
