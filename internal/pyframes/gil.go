package pyframes

// gilStructSize bounds struct _gil_runtime_state (3.12+: interval, last
// holder, locked, switch_number, cond, mutex, switch_cond, switch_mutex:
// about 200 bytes on x86_64 glibc); a futex a thread waits on inside it is
// the GIL's condition variable or mutex.
const gilStructSize = 256

// runtimeGILSpan bounds where the GIL lives inside _PyRuntime on ≤3.11
// (_PyRuntime.ceval.gil, a few hundred bytes from its start).
const runtimeGILSpan = 64 << 10

// GILRange returns the address range [lo, hi) holding the main
// interpreter's GIL state (its mutexes and condition variables): a thread
// blocked in futex on an address inside it is waiting for the GIL. 3.12+:
// the struct the interpreter's ceval.gil points to; ≤3.11: the GIL is
// embedded in _PyRuntime, so the range is _PyRuntime's first 64 KiB (other
// runtime locks there are rare waits and are counted as GIL). (0, 0) when
// it cannot be read, and on free-threaded builds (no GIL) unless their GIL
// is enabled at run time.
func (p *Process) GILRange() (lo, hi uint64) {
	l, r := p.Layout, &p.objs
	if l.InterpCevalGIL == 0 && !l.FreeThreaded {
		return p.Info.Runtime, p.Info.Runtime + runtimeGILSpan
	}
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil || interp == 0 {
		return 0, 0
	}
	gil, err := r.u64(interp + l.InterpCevalGIL)
	if err != nil || gil == 0 || l.FreeThreaded && !p.gilEnabled(gil) {
		return 0, 0
	}
	return gil, gil + gilStructSize
}

// gilEnabled says whether a free-threaded interpreter's GIL, at gil, is
// enabled now (at run time: PYTHON_GIL=1, or an extension module not
// declared free-threading safe was imported).
func (p *Process) gilEnabled(gil uint64) bool {
	if !p.Layout.GILEnabledKnown {
		return false
	}
	en, err := p.objs.u32(gil + p.Layout.GILEnabled)
	return err == nil && en != 0
}

// GILState is one reading of an interpreter's GIL.
type GILState struct {
	// Holder is the thread state holding it, 0 when it is free. 3.12+:
	// last_holder while locked is set (the taker sets locked first, then
	// last_holder; the dropper clears locked and leaves last_holder), and
	// on 3.15 the holder's own holds_gil set as well; ≤3.11: the runtime's
	// current thread state, cleared before the GIL is dropped.
	Holder uint64
	// Switches is switch_number (3.12+), which each take by a thread other
	// than the last holder bumps: two readings with the same holder and
	// count saw no other thread take it between. 0 on ≤3.11 (not read).
	Switches uint64
	// Read is false when there is no GIL (free-threaded) or it could not
	// be read.
	Read bool
}

// HeldThrough returns the thread state that held the GIL at both readings,
// s and a later one, with no other thread taking it between; 0 when it was
// free at either, changed hands, or either reading failed. (A holder that
// released the GIL and took it back with no one else taking it between,
// or on ≤3.11 one that got it back after another thread had it, looks as
// if it held it throughout.)
func (s GILState) HeldThrough(later GILState) uint64 {
	if !s.Read || !later.Read || s.Holder == 0 || s != later {
		return 0
	}
	return s.Holder
}

// GIL reads every interpreter's GIL, by interpreter id (as Thread.Interp);
// on a free-threaded build, nil unless its GIL is enabled at run time.
func (p *Process) GIL() map[int64]GILState {
	if p.Layout.FreeThreaded && !p.Layout.GILEnabledKnown {
		return nil
	}
	out := map[int64]GILState{}
	_ = p.interps(func(id int64, interp uint64) error {
		out[id] = p.gilState(interp)
		return nil
	})
	return out
}

// gilState reads interp's GIL (≤3.11: the runtime's; interp is unused).
func (p *Process) gilState(interp uint64) GILState {
	l, r := p.Layout, &p.objs
	switch {
	case l.FreeThreaded && !l.GILEnabledKnown:
		return GILState{} // no GIL (freethreaded.go)
	case l.InterpCevalGIL == 0:
		if l.RuntimeTstateCurrent == 0 {
			return GILState{}
		}
		h, err := r.u64(p.Info.Runtime + l.RuntimeTstateCurrent)
		return GILState{Holder: h, Read: err == nil}
	}
	gil, err := r.u64(interp + l.InterpCevalGIL)
	if err != nil || gil == 0 || l.FreeThreaded && !p.gilEnabled(gil) {
		return GILState{} // free-threaded: no GIL while it is not enabled
	}
	// The three fields in one read: one moment's holder, lock and count.
	lo := min(l.GILLastHolder, l.GILLocked, l.GILSwitchNumber)
	hi := max(l.GILLastHolder+8, l.GILLocked+4, l.GILSwitchNumber+8)
	var buf [64]byte
	if hi-lo > uint64(len(buf)) {
		return GILState{}
	}
	b := buf[:hi-lo]
	if err := r.mem.Read(gil+lo, b); err != nil {
		return GILState{}
	}
	st := GILState{Switches: le64(b, l.GILSwitchNumber-lo), Read: true}
	if int32(le32(b, l.GILLocked-lo)) > 0 { // 0: free; -1: not created
		st.Holder = le64(b, l.GILLastHolder-lo)
	}
	if st.Holder != 0 && l.TstateHoldsGIL != 0 {
		// 3.15: the holder says so too (set once it has taken the GIL,
		// cleared before it drops it).
		if v, err := r.u32(st.Holder + l.TstateHoldsGIL); err != nil || v == 0 {
			st.Holder = 0
		}
	}
	return st
}
