package procfs

import (
	"fmt"
	"os"
	"strings"
)

// ParseTaskStack reads /proc/PID/task/TID/stack ("[<0>] do_sys_poll+0x3a2/0x4e0"
// per line, innermost first; root only): the function names, offsets cut.
func ParseTaskStack(s string) []string {
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _, _ := strings.Cut(f[1], "+")
		names = append(names, n)
	}
	return names
}

// TaskStack reads a thread's kernel stack, innermost first.
func (f FS) TaskStack(pid, tid int) ([]string, error) {
	path := f.taskPath(pid, tid, "stack")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, path, err)
	}
	return ParseTaskStack(string(b)), nil
}
