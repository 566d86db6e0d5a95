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
