package dump

import "github.com/pyobs/pyobs/internal/session"

// taskStates describes every thread's scheduler state now (for dump
// --lock, which must read them before it stops the threads: once thawed,
// each is "running" for a moment while it goes back to its wait).
func taskStates(s *session.Session) map[int]string {
	tids, err := s.FS.Tasks(s.Pid)
	if err != nil {
		return nil
	}
	m := make(map[int]string, len(tids))
	for _, tid := range tids {
		if st, err := s.FS.TaskState(s.Pid, tid); err == nil {
			m[tid] = st.Describe()
		}
	}
	return m
}
