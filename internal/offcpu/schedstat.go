package offcpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// schedRunTime is the thread's total time on CPU so far, in ns, as the
// scheduler accounts it (/proc/PID/task/TID/schedstat, first field:
// sum_exec_runtime). It is the authority for a thread's on-CPU time over a
// window it lived through: the bpf engine's paired switch events are
// checked against it.
func schedRunTime(pid, tid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, false
	}
	return parseSchedstat(string(b))
}

// parseSchedstat reads "run_ns wait_ns timeslices\n".
func parseSchedstat(s string) (int64, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
