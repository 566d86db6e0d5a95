package offcpu

import (
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

// ClassStopped: stopped, not waiting for anything of its own — a
// job-control stop (SIGSTOP, SIGTSTP, SIGTTIN/OU: state T) or a tracer's
// stop (ptrace: state t) — until SIGCONT or the tracer lets it go.
const ClassStopped = "stopped"

// Classes in report order.
var Classes = []string{ClassLock, ClassGIL, ClassSleep, ClassPipe, ClassNet, ClassDisk, ClassStopped, ClassOther, ClassRunQueue}

// WaitInfo is what procfs says about a blocked thread.
type WaitInfo struct {
	State   string   // stat's one letter
	Syscall string   // name, "" when not in a syscall
	Args    []uint64 // the syscall's arguments
	Wchan   string
	FdLink  string // readlink of the fd ARG0 for read-like calls
	// NoFds: a select, pselect6, poll or ppoll given no descriptor and a
	// timeout, which only waits the timeout out (CPython 3.10's
	// time.sleep is pselect6(0, NULL, NULL, NULL, &ts)): a sleep.
	NoFds bool
	// Woken: the thread was runnable at the read (the kernel shows no
	// syscall then), so the read says nothing of the wait it left.
	Woken bool
}

// readWait reads task/TID/{stat,syscall} (and wchan, fd link when they
// decide the class).
func readWait(fs procfs.FS, pid, tid int) WaitInfo {
	var w WaitInfo
	if st, err := fs.TaskStat(pid, tid); err == nil {
		w.State = st.State
	}
	sc, err := fs.TaskSyscall(pid, tid)
	switch {
	case err == nil && sc.Running:
		w.Woken = true
		return w
	case err == nil && sc.Nr >= 0:
		w.Syscall = procfs.SyscallName(sc.Nr)
		w.Args = sc.Args
		w.NoFds = noFds(w.Syscall, w.Args)
	}
	switch w.Syscall {
	case "read", "readv", "pread64", "preadv", "preadv2":
		if len(w.Args) > 0 && w.Args[0] < 1<<31 {
			w.FdLink, _ = fs.FdLink(pid, int(w.Args[0]))
		}
	}
	if w.State == "D" || w.Syscall == "" {
		w.Wchan, _ = fs.TaskWchan(pid, tid)
	}
	return w
}

// Classify names the wait class of a blocked thread; gilLo/gilHi bound the
// interpreter's GIL state (a futex inside it is the GIL).
func Classify(w WaitInfo, gilLo, gilHi uint64) string {
	// A stopped thread still shows the syscall it was in (to be restarted
	// at SIGCONT): the stop, not that call, is why it does not run.
	if w.State == "T" || w.State == "t" || stopFrame(w.Wchan) {
		return ClassStopped
	}
	ioWait := strings.Contains(w.Wchan, "io_schedule") || strings.Contains(w.Wchan, "folio_wait")
	if ioWait || w.State == "D" && !procfs.UninterruptibleNotIO(w.Syscall) {
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
	case "poll", "ppoll", "select", "pselect6":
		if w.NoFds {
			return ClassSleep
		}
		return ClassNet
	case "epoll_wait", "epoll_pwait", "epoll_pwait2",
		"recvfrom", "recvmsg", "recvmmsg", "accept", "accept4", "connect", "sendto", "sendmsg":
		return ClassNet
	}
	return ClassOther
}

// noFds: whether a select, pselect6, poll or ppoll with these arguments
// waits on no descriptor, with a timeout — only for the timeout, like a
// nanosleep. Without a timeout it waits for a signal: left as it was.
func noFds(syscall string, args []uint64) bool {
	if len(args) < 5 {
		return false
	}
	switch syscall {
	case "select", "pselect6": // (nfds, readfds, writefds, exceptfds, timeout, …)
		return uint32(args[0]) == 0 && args[4] != 0
	case "poll": // (fds, nfds, timeout ms: < 0 waits for ever)
		return uint32(args[1]) == 0 && int32(args[2]) >= 0
	case "ppoll": // (fds, nfds, timeout timespec: NULL waits for ever, …)
		return uint32(args[1]) == 0 && args[2] != 0
	}
	return false
}

// stopFrame: the kernel function (a wchan, a kernel stack frame) a thread
// is stopped in: a job-control stop, a ptrace stop, a group stop's trap
// under PTRACE_SEIZE.
func stopFrame(fn string) bool {
	switch fn {
	case "do_signal_stop", "ptrace_stop", "do_jobctl_trap":
		return true
	}
	return false
}
