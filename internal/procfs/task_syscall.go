package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// TaskSyscall is /proc/PID/task/TID/syscall: what a stopped or blocked
// thread is doing — "running", or the syscall number, its six arguments,
// the stack pointer and the program counter (hex).
type TaskSyscall struct {
	Nr   int      // -1 running in user space; -2 unknown (unreadable, or garbage)
	Args []uint64 // the arguments the kernel shows (up to six), when Nr >= 0
	// Running: the kernel wrote "running" — the thread's state is
	// runnable (on a CPU, or woken and waiting for one), so whatever it
	// waited in is over.
	Running bool
}

// ParseTaskSyscall parses the file's text.
func ParseTaskSyscall(s string) TaskSyscall {
	t := TaskSyscall{Nr: ParseSyscallFile(s)}
	t.Running = t.Nr == -1 && strings.TrimSpace(s) == "running"
	if t.Nr < 0 {
		return t
	}
	f := strings.Fields(s)
	for _, a := range f[1:min(len(f), 7)] {
		v, _ := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
		t.Args = append(t.Args, v)
	}
	return t
}

// TaskSyscall reads task/TID/syscall (root, or the task's owner with
// ptrace access).
func (f FS) TaskSyscall(pid, tid int) (TaskSyscall, error) {
	var buf [256]byte
	path := f.taskPath(pid, tid, "syscall")
	b, err := readSmall(path, buf[:])
	if err != nil {
		return TaskSyscall{Nr: -2}, fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, path, err)
	}
	return ParseTaskSyscall(string(b)), nil
}

// TaskWchan reads task/TID/wchan: the kernel function a sleeping thread
// waits in; "" for a running one (the kernel writes "0").
func (f FS) TaskWchan(pid, tid int) (string, error) {
	var buf [128]byte
	path := f.taskPath(pid, tid, "wchan")
	b, err := readSmall(path, buf[:])
	if err != nil {
		return "", fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, path, err)
	}
	if string(b) == "0" {
		return "", nil
	}
	return string(b), nil
}
