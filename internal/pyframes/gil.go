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
// it cannot be read, and on free-threaded builds (no GIL).
func (p *Process) GILRange() (lo, hi uint64) {
	l, r := p.Layout, &p.objs
	if l.FreeThreaded {
		return 0, 0
	}
	if l.InterpCevalGIL == 0 {
		return p.Info.Runtime, p.Info.Runtime + runtimeGILSpan
	}
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil || interp == 0 {
		return 0, 0
	}
	gil, err := r.u64(interp + l.InterpCevalGIL)
	if err != nil || gil == 0 {
		return 0, 0
	}
	return gil, gil + gilStructSize
}
