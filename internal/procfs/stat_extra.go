package procfs

import (
	"os"
	"strings"
)

// OnlineCPUs is the number of CPUs /proc/stat lists (cpuN lines); 0 when
// it can't be read.
func OnlineCPUs() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) > 3 && strings.HasPrefix(l, "cpu") && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

// DelayAcct says whether the kernel's per-task delay accounting is on
// (/proc/sys/kernel/task_delayacct): "on", "off" or "unknown".
func DelayAcct() string {
	b, err := os.ReadFile("/proc/sys/kernel/task_delayacct")
	if err != nil {
		return "unknown"
	}
	switch strings.TrimSpace(string(b)) {
	case "0":
		return "off"
	case "1":
		return "on"
	}
	return "unknown"
}
