package ptrace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
)

// Syscall is one finished call, reported at its exit stop.
type Syscall struct {
	Tid  int
	Nr   int
	Args [6]uint64
	Ret  int64
	// Enter is when the thread was resumed into the call, Dur the time until
	// its exit stop was seen: the call's own latency plus the tracer's wake-up.
	Enter time.Time
	Dur   time.Duration
}

// Errno returns the error of a failed call, 0 when it succeeded.
func (c *Syscall) Errno() unix.Errno {
	if c.Ret < 0 && c.Ret >= -4095 {
		return unix.Errno(-c.Ret)
	}
	return 0
}

// Kernel-internal restart codes a tracer sees at the exit of an interrupted
// call (the kernel restarts it; user space never sees them).
const (
	ERESTARTSYS           = 512
	ERESTARTNOINTR        = 513
	ERESTARTNOHAND        = 514
	ERESTART_RESTARTBLOCK = 516
)

// ErrnoName names an errno, including the kernel's restart codes.
func ErrnoName(e unix.Errno) string {
	switch e {
	case ERESTARTSYS:
		return "ERESTARTSYS"
	case ERESTARTNOINTR:
		return "ERESTARTNOINTR"
	case ERESTARTNOHAND:
		return "ERESTARTNOHAND"
	case ERESTART_RESTARTBLOCK:
		return "ERESTART_RESTARTBLOCK"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "E" + strconv.Itoa(int(e))
}

// TraceConfig says what to trace.
type TraceConfig struct {
	Pid  int      // attach to this process's threads …
	Argv []string // … or spawn this command (from the tracer's thread) and trace it
	// Stdout: the spawned command's stdout (nil: the tracer's).
	Stdout *os.File
	// OnSpawn is called with the new pid right after a spawn.
	OnSpawn func(pid int)
	// OnExit is called at each syscall-exit stop, the thread still stopped
	// (its memory, Python stack included, is as it was during the call).
	// It runs on the tracer's thread: keep it short.
	OnExit func(c *Syscall)
	// Seccomp (with Argv): only these syscall numbers stop the command's
	// threads; the rest run untraced. The program must call SeccompExec
	// first thing when SeccompEnv is set (it is the re-exec'd helper).
	Seccomp []int
	// EndAtExec (with Pid): the trace ends at the process's exec (its
	// calls after it are another program's); TraceStats.Execed says so.
	EndAtExec bool
	// OnInProgress is called as the trace ends, before the detach, for
	// each thread stopped inside a call that had not returned (Dur: since
	// its entry, Ret 0), the thread still stopped: its stack is the
	// call's. Not counted in Syscalls.
	OnInProgress func(c *Syscall)
}

// SeccompEnv carries the filter to the re-exec'd helper ("NR,NR,…"),
// SeccompPathEnv the command's resolved path.
const (
	SeccompEnv     = "PYOBS_SECCOMP_EXEC"
	SeccompPathEnv = "PYOBS_SECCOMP_PATH"
)

// SeccompExec is the helper's whole life: install the filter named by
// SeccompEnv on this thread (it is inherited across exec) and exec the
// command in os.Args. It returns only when SeccompEnv is unset.
func SeccompExec() {
	spec, ok := os.LookupEnv(SeccompEnv)
	if !ok {
		return
	}
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "pyobs: seccomp helper: %v\n", err)
		os.Exit(127)
	}
	path := os.Getenv(SeccompPathEnv)
	var nrs []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || path == "" {
			fail(fmt.Errorf("bad syscall list %q or no path %q", spec, path))
		}
		nrs = append(nrs, n)
	}
	prog := SeccompFilter(nrs)
	// Filters are per thread: this one must exec from the thread it set.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err))
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fp)), 0, 0); err != nil {
		fail(fmt.Errorf("PR_SET_SECCOMP: %w", err))
	}
	_ = os.Unsetenv(SeccompEnv)
	_ = os.Unsetenv(SeccompPathEnv)
	fail(fmt.Errorf("exec %s: %w", path, syscall.Exec(path, os.Args, os.Environ())))
}

// SeccompFilter is a classic-BPF seccomp program: SECCOMP_RET_TRACE for the
// x86_64 syscalls in nrs, SECCOMP_RET_ALLOW for everything else.
func SeccompFilter(nrs []int) []unix.SockFilter {
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	n := len(nrs)
	// seccomp_data: nr at 0, arch at 4.
	prog := []unix.SockFilter{
		{Code: ldAbs, K: 4},
		{Code: jeq, K: unix.AUDIT_ARCH_X86_64, Jt: 0, Jf: uint8(n + 1)},
		{Code: ldAbs, K: 0},
	}
	for i, nr := range nrs {
		prog = append(prog, unix.SockFilter{Code: jeq, K: uint32(nr), Jt: uint8(n - i), Jf: 0})
	}
	return append(prog, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_TRACE})
}

// TraceStats is the tracer's own account.
type TraceStats struct {
	Pid        int
	Threads    int           // threads traced, new ones included
	Syscalls   uint64        // exit stops reported
	Stops      uint64        // ptrace stops handled
	Stopped    time.Duration // summed over threads: from seeing a stop to resuming it
	Signals    uint64        // signals passed through to the target
	GroupStops uint64
	// GroupStopped: wall time at least one tracee was kept in a group stop
	// (SIGSTOP, job control: stopped by someone else, not by the tracer);
	// GroupStoppedMax: the most tracees in one at once.
	GroupStopped    time.Duration
	GroupStoppedMax int
	Kicks           uint64 // our wake-up signals swallowed
	TargetGone      bool   // the traced process exited while traced
	Execed          bool   // EndAtExec: it exec'd, and the trace ended there
	ExitCode        int    // spawned process's status (128+signal when killed), -1 unknown
	Detached        int    // threads detached at the end
	DetachError     error  // first error while detaching, if any
	// Attached: the trace ended while a seccomp filter holds the spawned
	// command or processes it started, so the tracer could not let go (a
	// filtered call without a tracer fails with ENOSYS): it stays
	// attached, passing every stop through and counting nothing, until
	// they all end. These stats are the window's; Attached.Wait gives the
	// command's status.
	Attached *Attached
	// Children: processes the seccomp-filtered command started (the
	// filter passes to them): followed only to pass their stops through,
	// their calls neither stopped at nor counted. ChildrenLeft: of those,
	// still running when the window was handed over.
	Children, ChildrenLeft int
}

// Attached is a tracer still attached after its trace ended (seccomp).
type Attached struct {
	done chan struct{}
	code int
	t    *tracer
}

// Signal sends sig to the command, unless it is gone, and to every process
// it started that the tracer still passes through: the tracer waits for
// them all.
func (a *Attached) Signal(sig syscall.Signal) error {
	a.t.mu.Lock()
	var pids []int
	if !a.t.targetGone.Load() { // reaped: its pid may be another's now
		pids = append(pids, a.t.pid)
	}
	for p := range a.t.liveKids {
		pids = append(pids, p)
	}
	a.t.mu.Unlock()
	var first error
	for _, p := range pids {
		if err := unix.Kill(p, sig); err != nil && !errors.Is(err, unix.ESRCH) && first == nil {
			first = fmt.Errorf("signal %v to pid %d: %w", sig, p, err)
		}
	}
	return first
}

// Wait blocks until the command ended and returns its status (128+signal
// when a signal ended it, -1 when the tracer lost it).
func (a *Attached) Wait() int {
	<-a.done
	return a.code
}

type tracee struct {
	inSyscall bool
	// restarting: its last call returned ERESTART* (interrupted by a stop
	// or a signal without handler): the kernel runs it again, as the same
	// call or restart_syscall, still the one begun at began.
	restarting bool
	cont       bool      // the call in progress goes on such a call (restart_syscall, or itself again)
	began      time.Time // when the call in progress was entered
	// entrySeen: the call's syscall-entry stop was taken (a seccomp
	// tracee resumed with PTRACE_SYSCALL after an interrupted call): its
	// seccomp stop, which comes next, is the same entry.
	entrySeen bool
	nr        int
	args      [6]uint64
	resumed   time.Time // when it was last resumed
	listening bool      // kept in a group stop with PTRACE_LISTEN
	stopped   bool      // in a stop we have not resumed (end phase)
	detachSig int
}

type tracer struct {
	cfg     TraceConfig
	pid     int
	ts      map[int]*tracee
	st      TraceStats
	kickSig unix.Signal
	kickTid atomic.Int64 // tid the kick was sent to, 0 when none pending
	stop    atomic.Bool
	mu      sync.Mutex
	tids    []int // copy for the kicker
	// listening counts tracees kept in a group stop: a signal does not wake
	// them, so while there are any the loop polls instead of blocking.
	listening int
	listenAt  time.Time // when listening last changed
	// seccomp: resume with PTRACE_CONT outside traced calls; preExec: the
	// seccomp helper has not exec'd the command yet (nothing is counted).
	seccomp, preExec bool
	// ownStop, ownCont: a spawned command's group stop and the SIGCONT
	// that ends it, pyobs's own start (start), still to be seen: neither
	// is the target stopped by someone else nor a signal passed on.
	ownStop, ownCont bool
	// passthrough: asked to stop while a seccomp filter is in place: stops
	// are resumed, nothing is counted; window gets the stats at that moment.
	passthrough bool
	window      chan TraceStats
	// forgotten: threads an exec removed whose death reports are still to
	// come; they must not be counted again as new threads.
	forgotten map[int]bool
	// kids: tasks of the processes a seccomp-filtered command started
	// (TRACEFORK, TRACEVFORK): the filter is theirs too, and without a
	// tracer their filtered calls would fail with ENOSYS. Each stop is
	// resumed at once (PTRACE_CONT), nothing counted. liveKids: their
	// pids not gone yet (under mu, for Attached.Signal).
	kids, liveKids map[int]bool
	targetGone     atomic.Bool // the command's death was reported (for Attached.Signal)
	info           [128]byte
}

const (
	ptraceGetSyscallInfo = 0x420e
	syscallInfoEntry     = 1
	syscallInfoExit      = 2
	syscallInfoSeccomp   = 3
	seizeOpts            = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEEXIT
)

// Trace traces syscalls until ctx ends or the target exits, then detaches
// from every thread. All ptrace requests run on one locked OS thread.
func Trace(ctx context.Context, cfg TraceConfig) (TraceStats, error) {
	type result struct {
		st  TraceStats
		err error
	}
	t := &tracer{cfg: cfg, pid: cfg.Pid, ts: map[int]*tracee{}, window: make(chan TraceStats, 1), forgotten: map[int]bool{},
		kids: map[int]bool{}, liveKids: map[int]bool{}}
	t.st.ExitCode = -1
	res := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// The thread is left locked on purpose: it is the tracer (and maybe
		// the real parent) of tasks; Go retires it when this goroutine ends.
		err := t.start()
		close(started)
		if err == nil {
			err = t.loop()
		}
		t.setListening(t.listening) // the group stop's time up to now
		t.detachAll()
		res <- result{t.st, err}
	}()
	<-started
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			t.requestStop()
		case <-done:
			return
		}
		// A kicked thread may exit before its signal is delivered: kick again.
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				t.kickTid.Store(0)
				t.kick()
			}
		}
	}()
	select {
	case r := <-res:
		close(done)
		return r.st, r.err
	case st := <-t.window:
		// The window is over; the command runs on under a tracer that only
		// passes its stops through (no more kicks needed).
		close(done)
		a := &Attached{done: make(chan struct{}), t: t}
		go func() {
			r := <-res
			a.code = r.st.ExitCode
			close(a.done)
		}()
		st.Attached = a
		return st, nil
	}
}

func (t *tracer) requestStop() {
	t.stop.Store(true)
	t.kick()
}

// kick wakes the tracer's wait4 with a signal the tracer swallows.
func (t *tracer) kick() {
	t.mu.Lock()
	tids := append([]int(nil), t.tids...)
	t.mu.Unlock()
	if len(tids) == 0 {
		tids, _ = listTasks(t.pid)
	}
	for _, tid := range tids {
		if !t.kickTid.CompareAndSwap(0, int64(tid)) {
			return // one is on its way
		}
		if err := unix.Tgkill(t.pid, tid, t.kickSig); err == nil {
			return
		}
		t.kickTid.Store(0)
	}
}

// StartError: the command to trace could not be looked up or executed
// (Err: exec.LookPath's error or the exec's errno).
type StartError struct {
	Argv0 string
	Err   error
}

func (e *StartError) Error() string { return fmt.Sprintf("can't start %s: %v", e.Argv0, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

func (t *tracer) start() error {
	if len(t.cfg.Argv) > 0 {
		path, err := exec.LookPath(t.cfg.Argv[0])
		if err != nil {
			return &StartError{Argv0: t.cfg.Argv[0], Err: err}
		}
		env := os.Environ()
		opts := uintptr(seizeOpts)
		if len(t.cfg.Seccomp) > 0 {
			if len(t.cfg.Seccomp) > 200 {
				return fmt.Errorf("seccomp filter for %d syscalls: at most 200", len(t.cfg.Seccomp))
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				return err
			}
			var nrs []string
			for _, n := range t.cfg.Seccomp {
				nrs = append(nrs, strconv.Itoa(n))
			}
			env = append(env, SeccompEnv+"="+strings.Join(nrs, ","), SeccompPathEnv+"="+abs)
			path = proc().SelfExe()
			// The filter passes to every process the command starts: each
			// is followed from its fork, to be passed through.
			opts |= unix.PTRACE_O_TRACESECCOMP | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
			t.seccomp, t.preExec = true, true
		}
		// The child must not run a single instruction of CMD untraced (a short
		// command could even be gone before a seize): it starts under
		// PTRACE_TRACEME and stops at its exec; we let go of it into a
		// SIGSTOP group stop, seize it there (options included) and SIGCONT
		// it. The target sees one SIGCONT (default action: none).
		out := uintptr(1)
		if t.cfg.Stdout != nil {
			out = t.cfg.Stdout.Fd()
		}
		attr := &syscall.ProcAttr{Env: env, Files: []uintptr{0, out, 2}, Sys: &syscall.SysProcAttr{Ptrace: true}}
		pid, err := syscall.ForkExec(path, t.cfg.Argv, attr)
		if err != nil {
			return &StartError{Argv0: t.cfg.Argv[0], Err: err}
		}
		t.pid = pid
		t.st.Pid = pid
		if t.cfg.OnSpawn != nil {
			t.cfg.OnSpawn(pid)
		}
		fail := func(err error) error {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			return err
		}
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fail(fmt.Errorf("wait for %s to start: %w", t.cfg.Argv[0], err))
			}
			break
		}
		if !ws.Stopped() {
			return fail(fmt.Errorf("%s did not stop at its exec (status %#x)", t.cfg.Argv[0], uint32(ws)))
		}
		if err := ptraceDetach(pid, int(unix.SIGSTOP)); err != nil {
			return fail(fmt.Errorf("detach %s into a stop: %w", t.cfg.Argv[0], err))
		}
		for {
			_, err := unix.Wait4(pid, &ws, unix.WUNTRACED, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fail(fmt.Errorf("wait for %s to stop: %w", t.cfg.Argv[0], err))
			}
			break
		}
		if !ws.Stopped() {
			return fail(fmt.Errorf("%s did not stop (status %#x)", t.cfg.Argv[0], uint32(ws)))
		}
		t.kickSig = pickKickSignal(pid)
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, opts, 0, 0); e != 0 {
			return fail(fmt.Errorf("can't PTRACE_SEIZE pid %d: %w", pid, e))
		}
		t.add(pid)
		t.ownStop, t.ownCont = true, true
		if err := unix.Kill(pid, unix.SIGCONT); err != nil {
			return fail(fmt.Errorf("can't SIGCONT pid %d: %w", pid, err))
		}
		return nil
	}
	t.st.Pid = t.pid
	if ppidOf(t.pid) == os.Getpid() {
		// Our own child: whatever part of this process waits for it would
		// also consume its ptrace stops (the kernel treats a real parent in
		// the tracer's thread group as the tracer). Spawn it with Argv instead.
		return fmt.Errorf("pid %d is this process's own child: trace it by spawning it (TraceConfig.Argv), not by attaching", t.pid)
	}
	t.kickSig = pickKickSignal(t.pid)
	tids, err := listTasks(t.pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		if err := t.seize(tid); err != nil {
			if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPERM) && exitedTask(t.pid, tid) {
				continue // gone, or a main thread that exited while others run on (a zombie refuses the seize)
			}
			return err
		}
	}
	if len(t.ts) == 0 {
		return fmt.Errorf("pid %d has no thread left to trace", t.pid)
	}
	return nil
}

func (t *tracer) seize(tid int) error {
	// Options go with the seize: PTRACE_SETOPTIONS would need a stopped
	// tracee, and a clone in between would not be followed.
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, seizeOpts, 0, 0); e != 0 {
		return fmt.Errorf("can't PTRACE_SEIZE pid %d tid %d: %w", t.pid, tid, e)
	}
	t.add(tid)
	// Stop it once so we can resume it with PTRACE_SYSCALL; the interrupt
	// of a blocked call is restarted by the kernel (no EINTR).
	if err := unix.PtraceInterrupt(tid); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("can't PTRACE_INTERRUPT tid %d: %w", tid, err)
	}
	return nil
}

func (t *tracer) add(tid int) *tracee {
	if x := t.ts[tid]; x != nil {
		return x
	}
	x := &tracee{}
	t.ts[tid] = x
	delete(t.forgotten, tid) // a clone event names it: a thread of now, whatever the tid was
	t.st.Threads++
	t.mu.Lock()
	t.tids = append(t.tids, tid)
	t.mu.Unlock()
	return x
}

func (t *tracer) remove(tid int) {
	if x := t.ts[tid]; x != nil && x.listening {
		t.setListening(t.listening - 1)
	}
	delete(t.ts, tid)
	t.mu.Lock()
	for i, x := range t.tids {
		if x == tid {
			t.tids = append(t.tids[:i], t.tids[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
}

// waitAny is wait4(-1) over this thread's tracees and children only
// (__WNOTHREAD: never reap a child another part of pyobs started).
func waitAny() (int, unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOTHREAD, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return tid, ws, err
	}
}

// handOver ends the window while the tracer must stay: detaching would
// make every filtered call of the command, or of a process it started,
// fail with ENOSYS (SECCOMP_RET_TRACE without a tracer), also before the
// helper's exec (the filter is its first act). The window's stats go to
// Trace now; stops are then passed through, counting nothing, until all
// of them end. Their lives are the caller's to end (Ctrl-C), never the
// window's.
func (t *tracer) handOver() {
	t.passthrough = true
	t.setListening(t.listening)
	st := t.st
	if !st.TargetGone {
		st.ExitCode = -1
	}
	t.mu.Lock()
	st.ChildrenLeft = len(t.liveKids)
	t.mu.Unlock()
	t.window <- st
}

// addKid follows a task of a process the filtered command started, once
// (its first stop and its parent's event come in either order); proc: the
// task is a new process (its pid), not a thread of one.
func (t *tracer) addKid(tid int, proc bool) {
	if t.kids[tid] {
		return
	}
	t.kids[tid] = true
	if proc {
		t.st.Children++
		t.mu.Lock()
		t.liveKids[tid] = true
		t.mu.Unlock()
	}
}

// kidStop passes a stop of a process the command started through: its
// signals delivered, group stops kept, its forks and threads followed,
// everything else resumed at once. Its calls are not traced: a seccomp
// stop resumed with PTRACE_CONT runs the call.
func (t *tracer) kidStop(tid int, ws unix.WaitStatus) error {
	if ws.Exited() || ws.Signaled() {
		delete(t.kids, tid)
		t.mu.Lock()
		delete(t.liveKids, tid)
		t.mu.Unlock()
		return nil
	}
	if !ws.Stopped() {
		return nil
	}
	sig, event := stopOf(ws)
	resumeSig := 0
	switch {
	case sig == unix.SIGTRAP && (event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK || event == unix.PTRACE_EVENT_CLONE):
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
			child := int(msg)
			t.addKid(child, event != unix.PTRACE_EVENT_CLONE || tgidOf(child) == child)
		}
	case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXEC:
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil && int(msg) != tid {
			delete(t.kids, int(msg)) // the exec'ing thread took the leader's tid
		}
	case event == unix.PTRACE_EVENT_STOP:
		if sig == unix.SIGSTOP || sig == unix.SIGTSTP || sig == unix.SIGTTIN || sig == unix.SIGTTOU {
			if err := ptraceListen(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("PTRACE_LISTEN tid %d (a process pid %d started): %w", tid, t.pid, err)
			}
			return nil
		}
	case event != 0 || sig == unix.SIGTRAP|0x80:
	default:
		resumeSig = int(sig) // a signal on its way
	}
	if err := unix.PtraceCont(tid, resumeSig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("PTRACE_CONT tid %d (a process pid %d started): %w", tid, t.pid, err)
	}
	return nil
}

// notOurs handles a task of t.ts that is a new process, not a thread:
// with a filter it is passed through (kidStop), else let go.
func (t *tracer) notOurs(tid int, ws unix.WaitStatus) error {
	if !t.seccomp {
		t.detachNew(tid)
		return nil
	}
	t.remove(tid)
	t.st.Threads--
	t.addKid(tid, true)
	return t.kidStop(tid, ws)
}

func (t *tracer) loop() error {
	for len(t.ts) > 0 || len(t.kids) > 0 {
		if len(t.ts) == 0 && !t.passthrough {
			// The command ended; processes it started run on under its filter.
			t.st.TargetGone = true
			t.handOver()
		}
		if t.stop.Load() && !t.passthrough {
			if !t.seccomp {
				return nil
			}
			t.handOver()
		}
		var tid int
		var ws unix.WaitStatus
		var err error
		if t.listening > 0 {
			tid, err = unix.Wait4(-1, &ws, unix.WALL|unix.WNOTHREAD|unix.WNOHANG, nil)
			if err == nil && tid == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
		} else {
			tid, ws, err = waitAny()
		}
		now := time.Now()
		if err != nil {
			if errors.Is(err, unix.ECHILD) {
				t.ts = map[int]*tracee{}
				t.setListening(0)
				t.st.TargetGone = true
				return nil
			}
			return fmt.Errorf("wait4: %w", err)
		}
		if t.kids[tid] {
			if err := t.kidStop(tid, ws); err != nil {
				return err
			}
			continue
		}
		x := t.ts[tid]
		if x == nil && t.forgotten[tid] {
			// A thread an exec ended, reporting its exit stop or its death.
			if ws.Stopped() {
				_ = unix.PtraceCont(tid, 0)
			} else if ws.Exited() || ws.Signaled() {
				delete(t.forgotten, tid)
			}
			continue
		}
		if x == nil && t.seccomp && tgidOf(tid) != t.pid {
			// A process the command started, its first stop before its
			// parent's fork event (or its death report: gone already).
			t.addKid(tid, true)
			if err := t.kidStop(tid, ws); err != nil {
				return err
			}
			continue
		}
		if x == nil {
			// A new thread's first stop can come before its parent's clone event.
			x = t.add(tid)
		}
		if ws.Exited() || ws.Signaled() {
			t.gone(tid, ws)
			continue
		}
		if !ws.Stopped() {
			continue
		}
		t.st.Stops++
		sig, event := stopOf(ws)
		resumeSig := 0
		switch {
		case sig == unix.SIGTRAP|0x80:
			t.syscallStop(tid, x, now)
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_SECCOMP:
			// The helper's own exec is not the command's; after the window
			// the call runs on without an exit stop (PTRACE_CONT).
			if !t.preExec && !t.passthrough {
				t.syscallStop(tid, x, now)
			}
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_CLONE:
			if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
				child := int(msg)
				switch tg := tgidOf(child); {
				case tg != t.pid && tg > 0 && t.seccomp:
					t.addKid(child, true) // it reports its own stop
				case tg != t.pid && tg > 0:
					// A new process, not a thread: not ours to follow. It
					// starts in a stop; detaching resumes it.
					t.detachNew(child)
				default:
					t.add(child)
				}
			}
		case sig == unix.SIGTRAP && (event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK):
			// Only with a filter: the new process is passed through.
			if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
				t.addKid(int(msg), true)
			}
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXEC:
			// The exec'ing thread now has the leader's tid; the others are
			// gone (their death reports may still come: forgotten).
			if msg, err := unix.PtraceGetEventMsg(tid); err == nil && int(msg) != tid {
				t.remove(int(msg))
			}
			for other := range t.ts {
				if other != tid {
					t.remove(other)
					t.forgotten[other] = true
				}
			}
			if t.preExec {
				// The seccomp helper (this program, its Go runtime threads
				// included) became the command: its account starts here.
				t.st.Threads, t.st.Stops, t.st.Stopped, t.st.Signals = len(t.ts), 0, 0, 0
			} else if t.cfg.EndAtExec {
				// Another program from here: nothing more is counted (the
				// loop ends before its next stop is taken).
				t.st.Execed = true
				t.stop.Store(true)
			}
			t.preExec = false
			x.inSyscall = false
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXIT:
			// About to exit: let it.
		case event == unix.PTRACE_EVENT_STOP:
			if sig == unix.SIGSTOP || sig == unix.SIGTSTP || sig == unix.SIGTTIN || sig == unix.SIGTTOU {
				// Group stop: keep it stopped (job control), but stay notified.
				if t.ownStop && tid == t.pid && sig == unix.SIGSTOP {
					t.ownStop = false // the spawn's own stop, its SIGCONT sent
				} else {
					t.st.GroupStops++
					t.st.Stopped += time.Since(now)
					if !x.listening {
						t.setListening(t.listening + 1)
					}
					x.listening = true
				}
				if err := ptraceListen(tid); err != nil && !errors.Is(err, unix.ESRCH) {
					return fmt.Errorf("PTRACE_LISTEN tid %d: %w", tid, err)
				}
				continue
			}
			// Our interrupt, a new thread's first stop, or the end of a group stop.
			if x.listening {
				t.setListening(t.listening - 1)
			}
			x.listening = false
			if tgidOf(tid) != t.pid && tgidOf(tid) > 0 {
				if err := t.notOurs(tid, ws); err != nil {
					return err
				}
				continue
			}
		case event != 0:
			// other events (not requested): just resume
		default:
			// Signal-delivery stop.
			if sig == t.kickSig && t.kickTid.CompareAndSwap(int64(tid), 0) {
				t.st.Kicks++
				resumeSig = 0
			} else if t.ownCont && tid == t.pid && sig == unix.SIGCONT {
				t.ownCont = false // the spawn's own, delivered (the target sees it)
				resumeSig = int(sig)
			} else {
				t.st.Signals++
				resumeSig = int(sig)
			}
		}
		x.resumed = time.Now()
		t.st.Stopped += x.resumed.Sub(now)
		resume, how := unix.PtraceSyscall, "PTRACE_SYSCALL"
		if t.seccomp && !x.inSyscall && !x.restarting {
			// Outside a traced call: run until the filter stops the next one
			// (after an interrupted call, to its next entry: is it the
			// same call going on?).
			resume, how = unix.PtraceCont, "PTRACE_CONT"
		}
		if err := resume(tid, resumeSig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("%s tid %d: %w", how, tid, err)
		}
	}
	t.st.TargetGone = true
	return nil
}

// setListening sets the count of tracees kept in a group stop, adding the
// time since the last change to GroupStopped when there were any.
func (t *tracer) setListening(n int) {
	now := time.Now()
	if t.listening > 0 {
		t.st.GroupStopped += now.Sub(t.listenAt)
	}
	t.listening, t.listenAt = n, now
	t.st.GroupStoppedMax = max(t.st.GroupStoppedMax, n)
}

func (t *tracer) detachNew(tid int) {
	_ = unix.PtraceDetach(tid)
	t.remove(tid)
	t.st.Threads--
}

func (t *tracer) gone(tid int, ws unix.WaitStatus) {
	t.remove(tid)
	if tid == t.pid {
		t.targetGone.Store(true)
		if ws.Signaled() {
			t.st.ExitCode = 128 + int(ws.Signal())
		} else {
			t.st.ExitCode = ws.ExitStatus()
		}
	}
}

func (t *tracer) syscallStop(tid int, x *tracee, now time.Time) {
	n, err := ptraceSyscallInfo(tid, t.info[:])
	if err != nil || n < 24 {
		x.inSyscall = !x.inSyscall // fallback; should not happen on 5.3+
		return
	}
	op := t.info[0]
	switch op {
	case syscallInfoEntry, syscallInfoSeccomp:
		nr := int(le64(t.info[24:]))
		if op == syscallInfoSeccomp && x.entrySeen {
			x.entrySeen = false // the same entry, its seccomp stop
			return
		}
		x.entrySeen = false
		if x.restarting {
			// The last call was interrupted (ERESTART*): the tracee was
			// resumed to its next entry, whatever it is.
			x.restarting = false
			if nr == unix.SYS_RESTART_SYSCALL || nr == x.nr {
				// The interrupted call goes on: counted as itself (its
				// number, arguments and start), as the program made it.
				x.inSyscall, x.cont = true, true
				x.entrySeen = op == syscallInfoEntry
				return
			}
			if t.seccomp && op == syscallInfoEntry {
				// A new call (a handler ran: the program got EINTR),
				// seen only for the check above: traced if the filter
				// stops it (its seccomp stop comes next).
				x.inSyscall = false
				return
			}
		}
		x.inSyscall, x.cont = true, false
		x.began = now
		x.nr = nr
		for i := range x.args {
			x.args[i] = le64(t.info[32+8*i:])
		}
	case syscallInfoExit:
		if !x.inSyscall {
			return // we met this call in the middle
		}
		x.inSyscall = false
		ret := int64(le64(t.info[24:]))
		x.restarting = ret <= -ERESTARTSYS && ret >= -ERESTART_RESTARTBLOCK
		if t.passthrough {
			return
		}
		enter := x.resumed
		if x.cont {
			enter = x.began // its time from the call's first entry, the interrupted part included
		}
		x.cont = false
		c := Syscall{Tid: tid, Nr: x.nr, Args: x.args, Ret: ret, Enter: enter, Dur: now.Sub(enter)}
		t.st.Syscalls++
		if t.cfg.OnExit != nil {
			t.cfg.OnExit(&c)
		}
	}
}

// detachAll interrupts every tracee, waits for each to stop, and detaches.
func (t *tracer) detachAll() {
	if len(t.ts) == 0 {
		return
	}
	for tid, x := range t.ts {
		if !x.stopped {
			if err := unix.PtraceInterrupt(tid); errors.Is(err, unix.ESRCH) {
				t.remove(tid)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending := 0
		for _, x := range t.ts {
			if !x.stopped {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOTHREAD|unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			break
		}
		if tid == 0 {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		x := t.ts[tid]
		if x == nil {
			x = t.add(tid)
		}
		if ws.Exited() || ws.Signaled() {
			t.gone(tid, ws)
			continue
		}
		if !ws.Stopped() {
			continue
		}
		sig, event := stopOf(ws)
		switch {
		case sig == unix.SIGTRAP|0x80, sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_SECCOMP && !t.preExec:
			// A call's entry or exit met on the way out: a call that
			// returned is no longer in progress (and is counted).
			t.syscallStop(tid, x, time.Now())
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_CLONE:
			if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
				if tgidOf(int(msg)) != t.pid && tgidOf(int(msg)) > 0 {
					t.detachNew(int(msg))
				} else {
					t.add(int(msg)) // it will report its own stop
				}
			}
		case event == 0 && sig != unix.SIGTRAP|0x80 && sig != unix.SIGTRAP:
			// A signal on its way: deliver it as we let go (ours is swallowed).
			if sig == t.kickSig && t.kickTid.CompareAndSwap(int64(tid), 0) {
				t.st.Kicks++
			} else {
				x.detachSig = int(sig)
			}
		}
		x.stopped = true
	}
	if t.cfg.OnInProgress != nil && !t.passthrough {
		now := time.Now()
		for tid, x := range t.ts {
			// In a call, or between an interrupted call and its restart
			// (the window's own kick interrupts one).
			if x.stopped && (x.inSyscall || x.restarting) && !x.began.IsZero() {
				t.cfg.OnInProgress(&Syscall{Tid: tid, Nr: x.nr, Args: x.args, Enter: x.began, Dur: now.Sub(x.began)})
			}
		}
	}
	for tid, x := range t.ts {
		if err := ptraceDetach(tid, x.detachSig); err != nil && !errors.Is(err, unix.ESRCH) && t.st.DetachError == nil {
			t.st.DetachError = fmt.Errorf("PTRACE_DETACH tid %d: %w", tid, err)
		} else {
			t.st.Detached++
		}
		t.remove(tid)
	}
}

func stopOf(ws unix.WaitStatus) (unix.Signal, int) {
	return unix.Signal((uint32(ws) >> 8) & 0xff), int(uint32(ws) >> 16)
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func ptraceSyscallInfo(tid int, buf []byte) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceGetSyscallInfo, uintptr(tid), uintptr(len(buf)), uintptr(unsafe.Pointer(&buf[0])), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func ptraceDetach(tid, sig int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sig), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func ptraceListen(tid int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_LISTEN, uintptr(tid), 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// proc is /proc, for the tracer's few reads of it: opened at the first
// (every pyobs command would pay the stat at start otherwise).
var proc = sync.OnceValue(procfs.Default)

func listTasks(pid int) ([]int, error) { return proc().Tasks(pid) }

// tgidOf reads a task's thread-group id, -1 when it cannot.
func tgidOf(tid int) int {
	st, err := proc().Status(tid)
	if err != nil {
		return -1
	}
	return st.Tgid
}

func ppidOf(pid int) int {
	st, err := proc().Status(pid)
	if err != nil {
		return -1
	}
	return st.PPid
}

// pickKickSignal chooses a wake-up signal the target does not catch, so
// even one we fail to swallow has no effect (default action: ignore).
func pickKickSignal(pid int) unix.Signal {
	st, _ := proc().Status(pid)
	cgt := st.SigCgt
	for _, s := range []unix.Signal{unix.SIGURG, unix.SIGWINCH} {
		if cgt&(1<<(uint(s)-1)) == 0 {
			return s
		}
	}
	return unix.SIGURG
}

// exitedTask reports whether tid of pid is a zombie or gone.
func exitedTask(pid, tid int) bool {
	st, err := proc().TaskStat(pid, tid)
	return err != nil || st.State == "Z" || st.State == "X"
}
