package offcpu

import (
	"math"

	"github.com/pyobs/pyobs/internal/procfs"
)

// schedRunTime is the thread's total time on CPU so far, in ns, as the
// scheduler accounts it (task/TID/schedstat, first field:
// sum_exec_runtime). It is the authority for a thread's on-CPU time over a
// window it lived through: the bpf engine's paired switch events are
// checked against it.
func schedRunTime(pid, tid int) (int64, bool) {
	st, err := procfs.Default().TaskSchedstat(pid, tid)
	if err != nil || st.RunNs > math.MaxInt64 {
		return 0, false
	}
	return int64(st.RunNs), true
}
