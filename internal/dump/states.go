package dump

import (
	"sync"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/session"
)

// taskStates describes every thread's scheduler state now (for dump
// --lock, which must read them before it stops the threads: once thawed,
// each is "running" for a moment while it goes back to its wait).
func taskStates(s *session.Session) map[int]string { return allStates(s.FS, s.Pid) }

// allStates describes the state of every thread pid has now (nil: its
// task list could not be read).
func allStates(fs procfs.FS, pid int) map[int]string {
	tids, err := fs.Tasks(pid)
	if err != nil {
		return nil
	}
	return statesOf(fs, pid, tids)
}

// States is a read of every thread's scheduler state begun before the
// session is open (Options.EarlyStates): each state is three /proc files, about
// as long as the session's opening and the stacks' read together, and
// they need the pid only. Run takes it (Options.States); threads born
// since are read after the stacks, as Run does for any it misses.
type States struct {
	pid int
	ch  chan map[int]string
}

// EarlyStates begins reading pid's thread states, beside whatever the
// caller does next, when o reads them beside the stacks (not with Lock,
// Native or Tasks: nil then).
func (o Options) EarlyStates(pid int) *States {
	if o.Lock || o.Native || o.Tasks {
		return nil
	}
	return startStates(procfs.Default(), pid)
}

func startStates(fs procfs.FS, pid int) *States {
	st := &States{pid: pid, ch: make(chan map[int]string, 1)}
	go func() { st.ch <- allStates(fs, pid) }()
	return st
}

// wait is the read's result once done (nil: none).
func (st *States) wait() map[int]string { return <-st.ch }

// statesOf describes the scheduler state of each tid, eight reads at a
// time: each is three small /proc files, and a thread's syscall file
// waits for it to leave the CPU, so one after another a 50-thread dump
// paid the sum of those waits; side by side, about the slowest.
func statesOf(fs procfs.FS, pid int, tids []int) map[int]string {
	out := make(map[int]string, len(tids))
	if len(tids) == 0 {
		return out
	}
	dir, err := fs.OpenTaskDir(pid)
	if err != nil {
		return out
	}
	defer dir.Close()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, tid := range tids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if st, err := dir.State(tid); err == nil {
				d := st.Describe()
				mu.Lock()
				out[tid] = d
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}
