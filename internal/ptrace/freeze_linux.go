package ptrace

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"golang.org/x/sys/unix"
)

// Frozen is a set of seized, stopped threads. Thaw resumes them all; it is
// safe to call more than once. If pyobs dies instead, the kernel detaches
// its tracees and they run on.
type Frozen struct {
	Pid     int
	Tids    []int // the threads actually stopped
	Stopped time.Time
	reqs    chan func()
	done    chan struct{}
	thawed  bool
	// Held is how long the target was stopped, set by Thaw.
	Held time.Duration
	// JobStopped: every thread was in a job-control stop (SIGSTOP,
	// SIGTSTP…) when seized. Thaw then leaves the process stopped, as
	// it was found.
	JobStopped bool
}

// Freeze seizes and interrupts each tid of pid. Threads that vanish while
// being seized are skipped (they exited). Any other failure thaws what was
// already stopped and returns the error.
func Freeze(pid int, tids []int) (*Frozen, error) {
	f := &Frozen{Pid: pid, reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // ptrace requests must come from the seizing thread
		defer runtime.UnlockOSThread()
		errc <- f.stopAll(tids)
		for req := range f.reqs {
			req()
		}
		close(f.done)
	}()
	// While the seizes run, release the threads that die under them. If
	// another thread execs meanwhile, execve waits until every other thread
	// is released, and a traced one is released only when its tracer reaps
	// it; our seize of the next thread meanwhile waits for that execve to
	// finish (cred_guard_mutex): a deadlock, unless another of our threads
	// reaps (any thread of the tracer's process may). Stops are left alone.
	tick := time.NewTicker(2 * time.Millisecond)
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-errc:
			waiting = false
		case <-tick.C:
			reapExited(pid, tids)
		}
	}
	tick.Stop()
	if err != nil {
		f.Thaw()
		return nil, err
	}
	f.Stopped = time.Now()
	return f, nil
}

// reapExited reaps those of tids (not the leader: execve does not wait for
// it, and it may be our own child) that are our tracees and have exited.
func reapExited(pid int, tids []int) {
	for _, tid := range tids {
		if tid == pid {
			continue
		}
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, tid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
		if err != nil || info.Signo == 0 {
			continue // not ours (yet), or no news
		}
		if info.Code == cldExited || info.Code == cldKilled || info.Code == cldDumped {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		}
	}
}

// si_code values of SIGCHLD (include/uapi/asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

func (f *Frozen) stopAll(tids []int) error {
	for _, tid := range tids {
		err := unix.PtraceSeize(tid)
		// A process in the middle of an execve refuses too, for a moment;
		// on a loaded machine that moment has outlasted a 2 ms wait. (A
		// real gate then costs 126 ms before it is said, the threads
		// seized before it stopped meanwhile: a refusal is rare, a dump
		// that blames a gate for an exec is wrong.)
		for wait := 2 * time.Millisecond; errors.Is(err, unix.EPERM) && !exiting(f.Pid, tid) && wait <= seizeRetry; wait *= 2 {
			time.Sleep(wait)
			err = unix.PtraceSeize(tid)
		}
		if err != nil {
			if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPERM) && exiting(f.Pid, tid) {
				continue // exited meanwhile (an exiting thread refuses with EPERM)
			}
			return fmt.Errorf("can't PTRACE_SEIZE pid %d tid %d: %w", f.Pid, tid, err)
		}
		f.Tids = append(f.Tids, tid)
		if err := unix.PtraceInterrupt(tid); err != nil {
			return fmt.Errorf("can't PTRACE_INTERRUPT pid %d tid %d: %w", f.Pid, tid, err)
		}
	}
	// Collect each thread's stop round-robin with WNOHANG, not with one
	// blocking wait per thread in turn: if the target exits meanwhile, its
	// traced threads are zombies that only our wait releases, and the
	// leader's exit is not reported before they are (a blocking wait for the
	// leader first waits forever); a thread that execs takes the leader's id
	// and may never stop.
	pending := append([]int(nil), f.Tids...)
	stopped := make([]int, 0, len(pending))
	jobStopped := 0
	deadline := time.Now().Add(stopTimeout)
	for len(pending) > 0 {
		progress := false
		for i := 0; i < len(pending); i++ {
			tid := pending[i]
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) || (err == nil && wpid == 0) {
				continue // no news yet
			}
			progress = true
			switch {
			case err != nil, ws.Exited(), ws.Signaled():
				// ECHILD or dead: the thread is gone.
			case ws.Stopped() && int(uint32(ws)>>16) == unix.PTRACE_EVENT_STOP && ws.StopSignal() != unix.SIGTRAP:
				// A group-stop: the process was stopped by job control
				// (SIGSTOP, SIGTSTP…) before or while we seized it. It is
				// frozen as surely as by our interrupt; detaching leaves it
				// stopped (the kernel re-arms the group stop), never continued.
				stopped = append(stopped, tid)
				jobStopped++
			case ws.Stopped() && (ws.StopSignal() != unix.SIGTRAP || ws.TrapCause() != unix.PTRACE_EVENT_STOP):
				// A real signal arrived first: let it through and wait for our stop.
				sig := ws.StopSignal()
				if ws.TrapCause() > 0 || sig == unix.SIGTRAP {
					sig = 0
				}
				_ = unix.PtraceCont(tid, int(sig))
				continue
			case ws.Stopped():
				stopped = append(stopped, tid)
			default:
				continue
			}
			pending = append(pending[:i], pending[i+1:]...)
			i--
		}
		if len(pending) > 0 && !progress {
			if time.Now().After(deadline) {
				f.Tids = append(stopped, pending...) // Thaw lets go of them all
				return fmt.Errorf("can't stop pid %d: tids %v did not stop within %v (the process is exec'ing or exiting?)", f.Pid, pending, stopTimeout)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	f.Tids = stopped
	f.JobStopped = len(stopped) > 0 && jobStopped == len(stopped)
	return nil
}

// seizeRetry bounds the waits before a refused seize is believed: 2, 4,
// …, 64 ms, 126 ms in all.
const seizeRetry = 64 * time.Millisecond

// stopTimeout bounds the wait for the threads' stops (normally tens of µs).
const stopTimeout = time.Second

// Thaw detaches from every stopped thread, which resumes it.
func (f *Frozen) Thaw() {
	if f == nil || f.thawed {
		return
	}
	f.thawed = true
	if !f.Stopped.IsZero() {
		f.Held = time.Since(f.Stopped)
	}
	f.reqs <- func() {
		for _, tid := range f.Tids {
			_ = unix.PtraceDetach(tid)
		}
	}
	close(f.reqs)
	<-f.done
}

// exiting reports whether tid is gone or on its way out (the process
// exits, or another thread execs): PTRACE_SEIZE refuses such a thread with
// EPERM, which is then no permission problem.
func exiting(pid, tid int) bool {
	st, err := procfs.Default().TaskStat(pid, tid)
	if err != nil {
		return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) // gone
	}
	return st.State == "Z" || st.State == "X" || st.Flags&procfs.PFExiting != 0
}
