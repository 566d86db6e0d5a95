package trace

import (
	"fmt"
	"strings"

	"github.com/pyobs/pyobs/internal/pyframes"
	tptrace "github.com/pyobs/pyobs/internal/trace/ptrace"
)

// logLine is one --log line of the ptrace engine: tid, duration,
// syscall(decoded arguments) = result, Python site.
func logLine(c *tptrace.Syscall, name string, call Call, mem *pyframes.ProcessMemory) string {
	ret := fmt.Sprint(c.Ret)
	if call.Errno != "" {
		ret = "-1 " + call.Errno
	} else if c.Ret > 1<<32 || c.Ret < -(1<<32) {
		ret = fmt.Sprintf("%#x", uint64(c.Ret))
	}
	site := "-"
	if call.Site != nil {
		site = fmt.Sprintf("%s (%s:%d)", call.Site.Function, call.Site.File, call.Site.Line)
	}
	return fmt.Sprintf("%-7d %10.6fs %s(%s) = %s  %s", c.Tid, c.Dur.Seconds(), name, argSummary(name, c.Args, mem), ret, site)
}

// argKinds: p path, d fd (AT_FDCWD aware), n number, x hex.
var argKinds = map[string]string{
	"open": "pxx", "openat": "dpxx", "openat2": "dpx", "creat": "px", "stat": "px", "lstat": "px", "access": "pn",
	"newfstatat": "dpxx", "statx": "dpxxx", "faccessat": "dpn", "faccessat2": "dpnx", "readlink": "pxn", "readlinkat": "dpxn",
	"unlink": "p", "unlinkat": "dpx", "mkdir": "px", "mkdirat": "dpx", "rmdir": "p", "chdir": "p", "execve": "pxx",
	"rename": "pp", "renameat": "dpdp", "renameat2": "dpdpx",
	"read": "dxn", "write": "dxn", "pread64": "dxnn", "pwrite64": "dxnn", "readv": "dxn", "writev": "dxn",
	"close": "d", "fstat": "dx", "lseek": "dnn", "ioctl": "dxx", "fcntl": "dnx", "dup": "d", "dup2": "dd", "dup3": "ddx",
	"connect": "dxn", "accept": "dxx", "accept4": "dxxx", "sendto": "dxnxxn", "recvfrom": "dxnxxx", "getdents64": "dxn",
	"clock_nanosleep": "nnxx", "nanosleep": "xx", "select": "nxxxx", "poll": "xnn", "ppoll": "xnxx", "epoll_wait": "dxnn",
	"futex": "xnnx", "mmap": "xnxxdn", "munmap": "xn", "getpid": "", "gettid": "", "exit_group": "n",
}

func argSummary(name string, args [6]uint64, mem *pyframes.ProcessMemory) string {
	kinds, ok := argKinds[name]
	if !ok {
		kinds = "xxx"
	}
	parts := make([]string, 0, len(kinds))
	for i, k := range kinds {
		a := args[i]
		switch k {
		case 'p':
			parts = append(parts, readPath(mem, a))
		case 'd':
			if int32(a) == -100 {
				parts = append(parts, "AT_FDCWD")
			} else {
				parts = append(parts, fmt.Sprint(int32(a)))
			}
		case 'n':
			parts = append(parts, fmt.Sprint(int64(a)))
		default:
			parts = append(parts, fmt.Sprintf("%#x", a))
		}
	}
	return strings.Join(parts, ", ")
}

func readPath(mem *pyframes.ProcessMemory, addr uint64) string {
	if addr == 0 || mem == nil {
		return "NULL"
	}
	buf := make([]byte, 256)
	for n := len(buf); n >= 16; n /= 4 { // a short read can cross into an unmapped page
		if err := mem.Read(addr, buf[:n]); err == nil {
			b := buf[:n]
			if i := strings.IndexByte(string(b), 0); i >= 0 {
				return fmt.Sprintf("%q", b[:i])
			}
			return fmt.Sprintf("%q...", b)
		}
	}
	return fmt.Sprintf("%#x", addr)
}
