package ptrace

import (
	"errors"
	"fmt"
	"runtime"
	"time"

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
	if err := <-errc; err != nil {
		f.Thaw()
		return nil, err
	}
	f.Stopped = time.Now()
	return f, nil
}

func (f *Frozen) stopAll(tids []int) error {
	for _, tid := range tids {
		if err := unix.PtraceSeize(tid); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // exited meanwhile
			}
			return fmt.Errorf("can't PTRACE_SEIZE pid %d tid %d: %w", f.Pid, tid, err)
		}
		f.Tids = append(f.Tids, tid)
		if err := unix.PtraceInterrupt(tid); err != nil {
			return fmt.Errorf("can't PTRACE_INTERRUPT pid %d tid %d: %w", f.Pid, tid, err)
		}
	}
	for i := 0; i < len(f.Tids); i++ {
		tid := f.Tids[i]
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				// ECHILD: the thread is gone.
				f.Tids = append(f.Tids[:i], f.Tids[i+1:]...)
				i--
				break
			}
			if ws.Exited() || ws.Signaled() {
				f.Tids = append(f.Tids[:i], f.Tids[i+1:]...)
				i--
				break
			}
			if ws.Stopped() {
				if ws.StopSignal() != unix.SIGTRAP || ws.TrapCause() != unix.PTRACE_EVENT_STOP {
					// A real signal arrived first: let it through and wait for our stop.
					sig := ws.StopSignal()
					if ws.TrapCause() > 0 || sig == unix.SIGTRAP {
						sig = 0
					}
					_ = unix.PtraceCont(tid, int(sig))
					continue
				}
				break
			}
		}
	}
	return nil
}

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
