package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CountCPULines counts the "cpuN" lines of /proc/stat: the CPUs online.
func CountCPULines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if len(l) > 3 && strings.HasPrefix(l, "cpu") && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

// OnlineCPUs reads /proc/stat (the system's, not a process's) and counts
// its per-CPU lines; 0 when unreadable.
func (f FS) OnlineCPUs() (int, error) {
	path := filepath.Join(f.root, "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("can't read %s: %w", path, err)
	}
	return CountCPULines(string(b)), nil
}
