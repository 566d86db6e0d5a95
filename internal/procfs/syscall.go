package procfs

import "strconv"

// SyscallName names a syscall number of the architecture pyobs is built
// for (the number task/TID/syscall and the raw_syscalls tracepoints give),
// "syscall_N" when the table has no name for it.
func SyscallName(n int) string {
	if s, ok := syscallNames[n]; ok {
		return s
	}
	return "syscall_" + strconv.Itoa(n)
}

// UninterruptibleNotIO: a thread in uninterruptible sleep (state D) inside
// this call (by name) waits for no device. vfork waits, in D, for its
// child to exec or exit (Python's subprocess vforks); the memory-map calls
// wait for the process's mmap lock. Other calls in D (and D outside a
// call: a page fault) may be I/O.
func UninterruptibleNotIO(syscall string) bool {
	switch syscall {
	case "vfork", "clone", "clone3", "fork", "munmap", "mprotect", "brk", "mremap":
		return true
	}
	return false
}
