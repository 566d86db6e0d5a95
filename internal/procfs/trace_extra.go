package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SelfExe is this process's own executable, valid even after its file was
// replaced or deleted: what a re-exec of pyobs runs.
const SelfExe = "/proc/self/exe"

// status returns the value of one "Key:" line of /proc/TID/status.
func (f FS) status(tid int, key string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(f.root, strconv.Itoa(tid), "status"))
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// StatusInt reads a numeric field of /proc/TID/status (Tgid, PPid, …);
// -1 when it cannot (the task is gone, or no such field).
func (f FS) StatusInt(tid int, key string) int {
	v, ok := f.status(tid, key)
	if !ok {
		return -1
	}
	n, _ := strconv.Atoi(v)
	return n
}

// SigCaught is the mask of signals pid has handlers for (SigCgt in
// /proc/PID/status, bit n-1 for signal n); 0 when it cannot be read.
func (f FS) SigCaught(pid int) uint64 {
	v, _ := f.status(pid, "SigCgt")
	m, _ := strconv.ParseUint(v, 16, 64)
	return m
}
