package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// Schedstat is /proc/PID/task/TID/schedstat (CONFIG_SCHED_INFO): the
// scheduler's own account of a thread — time on CPU (sum_exec_runtime),
// time waiting on a run queue, and how many times it ran. It is the
// authority for a thread's on-CPU time over a window it lived through.
// (prometheus/procfs reads this file with an unanchored pattern that takes
// "-5 1 1" for 5 1 1; this parser wants exactly three unsigned numbers.)
type Schedstat struct {
	RunNs, WaitNs, Timeslices uint64
}

// ParseSchedstat reads "run_ns wait_ns timeslices\n".
func ParseSchedstat(s string) (Schedstat, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Schedstat{}, fmt.Errorf("schedstat: want 3 fields, got %q", trunc(s))
	}
	var v [3]uint64
	for i := range f {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return Schedstat{}, fmt.Errorf("schedstat: bad number %q", trunc(f[i]))
		}
		v[i] = n
	}
	return Schedstat{RunNs: v[0], WaitNs: v[1], Timeslices: v[2]}, nil
}

// TaskSchedstat reads task/TID/schedstat.
func (f FS) TaskSchedstat(pid, tid int) (Schedstat, error) {
	var buf [128]byte
	path := f.taskPath(pid, tid, "schedstat")
	b, err := readSmall(path, buf[:])
	if err != nil {
		return Schedstat{}, fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, path, err)
	}
	s, err := ParseSchedstat(string(b))
	if err != nil {
		return Schedstat{}, fmt.Errorf("pid %d tid %d: %s: %w", pid, tid, path, err)
	}
	return s, nil
}
