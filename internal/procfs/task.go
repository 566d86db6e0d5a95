package procfs

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// FS is a proc filesystem rooted at a mount point (tests use fixture trees).
type FS struct {
	root string
	fs   procfs.FS
}

// NewFS returns an FS rooted at mount (normally /proc).
func NewFS(mount string) (FS, error) {
	fs, err := procfs.NewFS(mount)
	if err != nil {
		return FS{}, fmt.Errorf("can't open proc filesystem %s: %w", mount, err)
	}
	return FS{root: mount, fs: fs}, nil
}

// Default is /proc.
func Default() FS {
	fs, _ := NewFS("/proc")
	return fs
}

// ErrNoProcess: /proc has no such pid.
var ErrNoProcess = errors.New("no such process")

// Process is what the session needs to know before attaching.
type Process struct {
	Pid     int
	Comm    string
	State   string // one letter: R S D Z T t X I (a live thread's when the main thread exited)
	Kernel  bool   // a kernel thread: no user memory, nothing to read
	Threads int
}

// Process reads /proc/PID/stat.
func (f FS) Process(pid int) (Process, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Process{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Process{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Process{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Process{}, fmt.Errorf("can't read /proc/%d/stat: %w", pid, err)
	}
	pr := Process{Pid: pid, Comm: st.Comm, State: st.State, Kernel: st.Flags&PFKthread != 0, Threads: st.NumThreads}
	if deadState(pr.State) {
		// A zombie leader with live threads is a live process: its state
		// is a live thread's (leader.go).
		if tid, ok := f.liveThread(pid); ok {
			if ts, err := f.TaskStat(pid, tid); err == nil && !deadState(ts.State) {
				pr.State = ts.State
			}
		}
	}
	return pr, nil
}

// Tasks lists the TIDs of pid, sorted.
func (f FS) Tasks(pid int) ([]int, error) {
	dir := f.pidPath(pid, "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't list %s: %w", pid, dir, err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	sort.Ints(tids)
	return tids, nil
}

// TaskState is a thread's scheduler state at the moment of reading.
type TaskState struct {
	Tid     int
	Comm    string
	State   string // one letter
	Wchan   string // kernel function it sleeps in, "" when running
	Syscall int    // syscall number it is blocked in; -1 running in user space; -2 unknown
}

// TaskState reads task/TID/{stat,wchan,syscall}.
func (f FS) TaskState(pid, tid int) (TaskState, error) {
	return f.taskState(unix.AT_FDCWD, f.taskPath(pid, tid)+"/", pid, tid)
}

// taskState reads a thread's three files, named prefix+file relative to
// dirfd.
func (f FS) taskState(dirfd int, prefix string, pid, tid int) (TaskState, error) {
	var buf [512]byte
	b, err := readSmallAt(dirfd, prefix+"stat", buf[:])
	if err != nil {
		return TaskState{}, fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, f.taskPath(pid, tid, "stat"), err)
	}
	comm, state, err := statCommState(b)
	if err != nil {
		return TaskState{}, fmt.Errorf("pid %d tid %d: %s: %w", pid, tid, f.taskPath(pid, tid, "stat"), err)
	}
	ts := TaskState{Tid: tid, Comm: comm, State: state, Syscall: -2}
	if ts.State != "R" {
		if b, err := readSmallAt(dirfd, prefix+"wchan", buf[:]); err == nil && string(b) != "0" {
			ts.Wchan = string(b)
		}
	}
	if b, err := readSmallAt(dirfd, prefix+"syscall", buf[:]); err == nil {
		ts.Syscall = ParseSyscallFile(string(b))
	}
	return ts, nil
}

// TaskDir is a process's task directory held open, so that each thread's
// files are opened relative to it: a dump reads three files of every
// thread, and each open by full path walks /proc/PID/task again.
type TaskDir struct {
	f   FS
	pid int
	fd  int
}

// OpenTaskDir opens /proc/PID/task; Close it when done.
func (f FS) OpenTaskDir(pid int) (*TaskDir, error) {
	path := f.pidPath(pid, "task")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't open %s: %w", pid, path, err)
	}
	return &TaskDir{f: f, pid: pid, fd: fd}, nil
}

// State is FS.TaskState through the open directory.
func (d *TaskDir) State(tid int) (TaskState, error) {
	return d.f.taskState(d.fd, strconv.Itoa(tid)+"/", d.pid, tid)
}

// Close releases the directory.
func (d *TaskDir) Close() error { return unix.Close(d.fd) }

// ParseSyscallFile reads /proc/PID/task/TID/syscall: "running", or the
// syscall number followed by arguments and sp/pc; -2 for anything else.
func ParseSyscallFile(s string) int {
	s = strings.TrimSpace(s)
	if s == "running" {
		return -1
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return -2
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil || n < -1 || n > 1<<16 {
		return -2
	}
	return n
}

// Describe renders a state for people: "running", "sleeping in
// futex_wait_queue (futex)", "disk in io_schedule (read)", …
func (t TaskState) Describe() string {
	var s string
	switch t.State {
	case "R":
		return "running"
	case "S":
		s = "sleeping"
	case "D":
		s = "disk"
	case "T":
		s = "stopped"
	case "t":
		s = "tracing stop"
	case "Z":
		return "zombie"
	case "X":
		return "dead"
	case "I":
		s = "idle"
	default:
		s = "state " + t.State
	}
	if t.Wchan != "" {
		s += " in " + t.Wchan
	}
	if t.Syscall >= 0 {
		s += " (" + SyscallName(t.Syscall) + ")"
	}
	return s
}
