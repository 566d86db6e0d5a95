package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Pids lists every process (not thread) /proc shows, sorted.
func (f FS) Pids() ([]int, error) {
	ents, err := os.ReadDir(f.root)
	if err != nil {
		return nil, fmt.Errorf("can't list %s: %w", f.root, err)
	}
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

// Ppid is the parent process id of pid (from /proc/PID/stat).
func (f FS) Ppid(pid int) (int, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("can't read /proc/%d/stat: %w", pid, err)
	}
	return st.PPID, nil
}

// Descendants lists the living descendants of pid (children, theirs, ...),
// sorted, from one pass over every process's parent. A process whose
// parent exited was re-parented (to init or a subreaper) and is not found.
func (f FS) Descendants(pid int) ([]int, error) {
	pids, err := f.Pids()
	if err != nil {
		return nil, err
	}
	kids := map[int][]int{}
	for _, p := range pids {
		pp, err := f.Ppid(p)
		if err != nil {
			continue // exited meanwhile
		}
		kids[pp] = append(kids[pp], p)
	}
	var out []int
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
				queue = append(queue, k)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// Cmdline is /proc/PID/cmdline split at its NULs (empty for a kernel
// thread or a zombie).
func (f FS) Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(f.pidPath(pid, "cmdline"))
	if err == nil && len(b) == 0 {
		if tid, ok := f.LiveTask(pid); ok && tid != pid { // the main thread exited
			b, err = os.ReadFile(f.pidPath(tid, "cmdline"))
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("can't read /proc/%d/cmdline: %w", pid, err)
	}
	return ParseCmdline(b), nil
}

// ParseCmdline splits a cmdline file's bytes at NULs (a trailing NUL ends
// the last argument; a process that rewrote its cmdline as one string
// gives one argument).
func ParseCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// CgroupProcs lists the processes of a cgroup v2 directory (its
// cgroup.procs; not those of its child cgroups), sorted.
func CgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("can't read %s: %w", filepath.Join(dir, "cgroup.procs"), err)
	}
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(l)
		if err != nil {
			return nil, fmt.Errorf("can't read %s: %q is not a pid", filepath.Join(dir, "cgroup.procs"), l)
		}
		pids = append(pids, n)
	}
	sort.Ints(pids)
	return pids, nil
}

// CgroupID is a cgroup v2 directory's id: the inode number of the
// directory, which is what the kernel's bpf_get_current_cgroup_id returns
// for a task in it.
func CgroupID(dir string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w: %w", dir, ErrNotCgroup, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0, fmt.Errorf("cgroup %s: %w: %w", dir, ErrNotCgroup, syscall.ENOTDIR)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("cgroup %s: can't statfs: %w", dir, err)
	}
	const cgroup2Magic = 0x63677270
	if fs.Type != cgroup2Magic {
		return 0, fmt.Errorf("cgroup %s: %w: its filesystem is of type %#x, not cgroup2", dir, ErrNotCgroup, fs.Type)
	}
	return st.Ino, nil
}

// ErrNotCgroup: a path given as a cgroup names no cgroup v2 directory.
var ErrNotCgroup = errors.New("not a cgroup v2 directory")
