package dump

import (
	"sync"

	"github.com/pyobs/pyobs/internal/session"
)

// taskStates describes every thread's scheduler state now (for dump
// --lock, which must read them before it stops the threads: once thawed,
// each is "running" for a moment while it goes back to its wait).
func taskStates(s *session.Session) map[int]string {
	tids, err := s.FS.Tasks(s.Pid)
	if err != nil {
		return nil
	}
	return statesOf(s, tids)
}

// statesOf describes the scheduler state of each tid, eight reads at a
// time: each is three small /proc files, and a thread's syscall file
// waits for it to leave the CPU, so one after another a 50-thread dump
// paid the sum of those waits; side by side, about the slowest.
func statesOf(s *session.Session, tids []int) map[int]string {
	out := make(map[int]string, len(tids))
	if len(tids) == 0 {
		return out
	}
	dir, err := s.FS.OpenTaskDir(s.Pid)
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
