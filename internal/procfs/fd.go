package procfs

import (
	"fmt"
	"os"
	"strconv"
)

// Fds lists the open descriptors of pid (/proc/PID/fd), in directory order.
func (f FS) Fds(pid int) ([]int, error) {
	dir := f.pidPath(pid, "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't list %s: %w", pid, dir, err)
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// FdLink reads /proc/PID/fd/N: a path, or "pipe:[INODE]", "socket:[INODE]",
// "anon_inode:[eventpoll]", ….
func (f FS) FdLink(pid, fd int) (string, error) {
	return f.readlink(pid, f.pidPath(pid, "fd", strconv.Itoa(fd)))
}
