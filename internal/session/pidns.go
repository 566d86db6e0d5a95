package session

import "slices"

// A target in another pid namespace (a container) knows its threads by that
// namespace's numbers: CPython's native_thread_id and glibc's pthread tid
// say 1, 2, … where /proc and perf_event_open (our namespace) say 27832,
// 27833, …. hostTids maps the target's numbers to ours, from the NSpid line
// of each /proc/PID/task/TID/status (ours first, the innermost last); it is
// nil when the target shares our namespace, and then ids need no mapping.
func (s *Session) hostTids() map[int]int { return s.FS.HostTids(s.Pid) }

// hostTid is the thread's id in our namespace given the one the target
// recorded (native) or, failing that, its pthread; 0 when unknown. ns is
// hostTids' map (nil: same namespace). With tids (the process's threads),
// a recorded id that is not one of them is not trusted: a fork that
// bypassed Python's own handling (a C library's fork) leaves the parent's
// thread states, their ids the parent's threads'; the thread that forked
// is found by its pthread, the others get 0.
func (s *Session) hostTid(native int, pthread uint64, tids []int, ns map[int]int) int {
	if ns == nil {
		if native != 0 && (tids == nil || slices.Contains(tids, native)) {
			return native
		}
		return s.tidFromPthread(pthread, tids)
	}
	if native == 0 {
		// glibc's tid is the target's number too: check it against theirs.
		inner := make([]int, 0, len(ns))
		for k := range ns {
			inner = append(inner, k)
		}
		native = s.tidFromPthread(pthread, inner)
	}
	return ns[native]
}
