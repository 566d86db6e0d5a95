package session

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A target in another pid namespace (a container) knows its threads by that
// namespace's numbers: CPython's native_thread_id and glibc's pthread tid
// say 1, 2, … where /proc and perf_event_open (our namespace) say 27832,
// 27833, …. hostTids maps the target's numbers to ours, from the NSpid line
// of each /proc/PID/task/TID/status (ours first, the innermost last); it is
// nil when the target shares our namespace, and then ids need no mapping.
func (s *Session) hostTids() map[int]int {
	self, err1 := os.Readlink("/proc/self/ns/pid")
	its, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.Pid))
	if err1 != nil || err2 != nil || self == its {
		return nil
	}
	tids, err := s.FS.Tasks(s.Pid)
	if err != nil {
		return nil
	}
	m := make(map[int]int, len(tids))
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", s.Pid, tid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 1 {
					if inner, err := strconv.Atoi(f[len(f)-1]); err == nil {
						m[inner] = tid
					}
				}
				break
			}
		}
	}
	return m
}

// hostTid is the thread's id in our namespace given the one the target
// recorded (native) or, failing that, its pthread; 0 when unknown. ns is
// hostTids' map (nil: same namespace).
func (s *Session) hostTid(native int, pthread uint64, tids []int, ns map[int]int) int {
	if ns == nil {
		if native != 0 {
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
