package procfs

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// readSmall reads a small one-record /proc file whole into buf (grown as
// needed) with plain open/read/close: os.ReadFile adds a stat, a poller
// registration the kernel refuses for /proc files, and fcntl calls — per
// file, twice the syscalls, which a dump pays for three files of every
// thread.
func readSmall(path string, buf []byte) ([]byte, error) {
	return readSmallAt(unix.AT_FDCWD, path, buf)
}

// readSmallAt is readSmall of a name relative to the directory dirfd.
func readSmallAt(dirfd int, name string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf)+512)...)
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		if n < len(buf) {
			// Every caller reads a one-record seq_file (stat, wchan,
			// syscall, schedstat): the kernel makes the record whole and
			// a read copies all of it that fits, so a read that leaves
			// room has reached the end. The read that would return 0 is
			// a quarter of the syscalls of a thread's state.
			return buf[:n], nil
		}
	}
}

var errStatLine = errors.New("malformed stat line")

// statCommState takes a task's name and state letter from its stat line:
// the name lies between the first '(' and the last ')' (a name may hold
// both), the state follows.
func statCommState(b []byte) (comm, state string, err error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open || close+3 > len(b) || b[close+1] != ' ' {
		return "", "", fmt.Errorf("%w: %.40q", errStatLine, b)
	}
	return string(b[open+1 : close]), string(b[close+2 : close+3]), nil
}
