package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Sysctl reads /proc/sys/NAME ("kernel/perf_event_paranoid"), trimmed.
func (f FS) Sysctl(name string) (string, error) {
	path := filepath.Join(f.root, "sys", filepath.Clean("/"+name))
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("can't read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// DelayAcct says whether the kernel counts per-task delays
// (kernel.task_delayacct): "on", "off" or "unknown".
func (f FS) DelayAcct() string {
	v, err := f.Sysctl("kernel/task_delayacct")
	if err != nil {
		return "unknown"
	}
	switch v {
	case "0":
		return "off"
	case "1":
		return "on"
	}
	return "unknown"
}

// UnprivilegedBPF is kernel.unprivileged_bpf_disabled as the kernel writes
// it ("0", "1", "2"), or def when unreadable.
func (f FS) UnprivilegedBPF(def string) string {
	v, err := f.Sysctl("kernel/unprivileged_bpf_disabled")
	if err != nil {
		return def
	}
	return v
}
