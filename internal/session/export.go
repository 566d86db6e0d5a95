package session

// Exported views of the session's thread bookkeeping, for the engines that
// read threads themselves (dump).

// HostTids maps the target's own thread numbers to ours when it lives in
// another pid namespace; nil when it shares ours (no mapping needed).
func (s *Session) HostTids() map[int]int { return s.hostTids() }

// HostTid is the thread's id in our namespace from the one the target
// recorded (native) or its pthread; 0 when unknown. ns is HostTids' map.
func (s *Session) HostTid(native int, pthread uint64, tids []int, ns map[int]int) int {
	return s.hostTid(native, pthread, tids, ns)
}

// TidFromPthread reads glibc's tid out of a pthread (3.10 has no
// native_thread_id); 0 when it is not one of tids.
func (s *Session) TidFromPthread(pthread uint64, tids []int) int {
	return s.tidFromPthread(pthread, tids)
}
