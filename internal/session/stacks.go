package session

import (
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// TidMap resolves kernel TIDs to thread states for samplers, refreshing its
// view of the interpreter's threads when it meets a TID it does not know
// (at most every minRefresh, so native-only threads don't cost a walk each).
type TidMap struct {
	s           *Session
	byTid       map[int]pyframes.ThreadRef
	lastRefresh time.Time
	minRefresh  time.Duration
}

// NewTidMap starts an empty map over the session's interpreter.
func (s *Session) NewTidMap() *TidMap {
	return &TidMap{s: s, byTid: map[int]pyframes.ThreadRef{}, minRefresh: 20 * time.Millisecond}
}

// Lookup returns the thread state of tid, if the interpreter has one.
func (m *TidMap) Lookup(tid int) (pyframes.ThreadRef, bool) {
	if r, ok := m.byTid[tid]; ok {
		return r, true
	}
	if time.Since(m.lastRefresh) < m.minRefresh {
		return pyframes.ThreadRef{}, false
	}
	m.Refresh()
	r, ok := m.byTid[tid]
	return r, ok
}

// Refresh re-reads the interpreter's thread list.
func (m *TidMap) Refresh() {
	m.lastRefresh = time.Now()
	refs, err := m.s.Py.ThreadRefs()
	if err != nil {
		return
	}
	var tids []int
	ns := m.s.hostTids()
	by := make(map[int]pyframes.ThreadRef, len(refs))
	for _, r := range refs {
		if r.NativeID == 0 && tids == nil && ns == nil {
			tids, _ = m.s.FS.Tasks(m.s.Pid)
		}
		tid := m.s.hostTid(r.NativeID, r.ThreadID, tids, ns)
		if old, ok := by[tid]; tid != 0 && (!ok || r.Interp < old.Interp) {
			// A thread with states in several interpreters (it runs a
			// sub-interpreter's code) is its state in the lowest, where
			// it started: the frames that called into the others.
			r.NativeID = tid
			by[tid] = r
		}
	}
	m.byTid = by
}

// All returns every known thread state.
func (m *TidMap) All() []pyframes.ThreadRef {
	out := make([]pyframes.ThreadRef, 0, len(m.byTid))
	for _, r := range m.byTid {
		out = append(out, r)
	}
	return out
}
