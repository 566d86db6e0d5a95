package offcpu

import (
	"os"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
)

// Wait classes.
const (
	ClassLock     = "lock"
	ClassGIL      = "GIL"
	ClassSleep    = "sleep"
	ClassPipe     = "pipe/read"
	ClassNet      = "network/poll"
	ClassDisk     = "disk I/O"
	ClassRunQueue = "run-queue"
	ClassOther    = "other"
)

// Classes in report order.
var Classes = []string{ClassLock, ClassGIL, ClassSleep, ClassPipe, ClassNet, ClassDisk, ClassOther, ClassRunQueue}

// WaitInfo is what procfs says about a blocked thread.
type WaitInfo struct {
	State   string   // stat's one letter
	Syscall string   // name, "" when not in a syscall
	Args    []uint64 // the syscall's arguments
	Wchan   string
	FdLink  string // readlink of /proc/PID/fd/ARG0 for read-like calls
}

// readWait reads task/TID/{stat,syscall} (and wchan, fd link when they
// decide the class).
func readWait(root string, pid, tid int) WaitInfo {
	dir := root + "/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/"
	var w WaitInfo
	if b, err := os.ReadFile(dir + "stat"); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			w.State = s[i+2 : i+3]
		}
	}
	if b, err := os.ReadFile(dir + "syscall"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil && n >= 0 {
				w.Syscall = procfs.SyscallName(n)
				for _, a := range f[1:min(len(f), 7)] {
					v, _ := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
					w.Args = append(w.Args, v)
				}
			}
		}
	}
	switch w.Syscall {
	case "read", "readv", "pread64", "preadv", "preadv2":
		if len(w.Args) > 0 {
			w.FdLink, _ = os.Readlink(root + "/" + strconv.Itoa(pid) + "/fd/" + strconv.FormatUint(w.Args[0], 10))
		}
	}
	if w.State == "D" || w.Syscall == "" {
		if b, err := os.ReadFile(dir + "wchan"); err == nil && string(b) != "0" {
			w.Wchan = string(b)
		}
	}
	return w
}

// Classify names the wait class of a blocked thread; gilLo/gilHi bound the
// interpreter's GIL state (a futex inside it is the GIL).
func Classify(w WaitInfo, gilLo, gilHi uint64) string {
	if w.State == "D" || strings.Contains(w.Wchan, "io_schedule") || strings.Contains(w.Wchan, "folio_wait") {
		return ClassDisk
	}
	switch w.Syscall {
	case "futex", "futex_wait", "futex_waitv":
		if len(w.Args) > 0 && gilHi > gilLo && w.Args[0] >= gilLo && w.Args[0] < gilHi {
			return ClassGIL
		}
		return ClassLock
	case "nanosleep", "clock_nanosleep":
		return ClassSleep
	case "read", "readv", "pread64", "preadv", "preadv2":
		switch {
		case strings.HasPrefix(w.FdLink, "pipe:"):
			return ClassPipe
		case strings.HasPrefix(w.FdLink, "socket:"):
			return ClassNet
		case strings.HasPrefix(w.FdLink, "/"):
			return ClassDisk
		}
		return ClassOther
	case "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6",
		"recvfrom", "recvmsg", "recvmmsg", "accept", "accept4", "connect", "sendto", "sendmsg":
		return ClassNet
	}
	return ClassOther
}
