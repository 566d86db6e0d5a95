package procfs

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// Stat is /proc/PID/stat or /proc/PID/task/TID/stat, read through
// prometheus/procfs (which finds the comm between the first "(" and the
// last ")", so a comm holding parentheses or spaces parses).
type Stat struct {
	Comm        string
	State       string // one letter: R S D Z T t X I
	Flags       uint   // PF_* (include/linux/sched.h)
	UTimeTicks  uint64 // in UserHZ; for a process, all its threads, living and dead
	STimeTicks  uint64
	CUTimeTicks uint64 // a process: the children it waited for
	CSTimeTicks uint64
	Threads     int
	Processor   int
}

// PF_* flags of a task (include/linux/sched.h).
const (
	PFExiting = 0x00000004 // the task is on its way out
	PFKthread = 0x00200000 // a kernel thread
)

// CPUSeconds is user + system time in seconds.
func (s Stat) CPUSeconds() float64 { return float64(s.UTimeTicks+s.STimeTicks) / UserHZ }

func statOf(st procfs.ProcStat) Stat {
	return Stat{Comm: st.Comm, State: st.State, Flags: st.Flags, UTimeTicks: uint64(st.UTime), STimeTicks: uint64(st.STime),
		CUTimeTicks: uint64(max(st.CUTime, 0)), CSTimeTicks: uint64(max(st.CSTime, 0)),
		Threads: st.NumThreads, Processor: int(st.Processor)}
}

// Stat reads /proc/PID/stat. The error wraps os.ErrNotExist (or ESRCH)
// when the process is gone.
func (f FS) Stat(pid int) (Stat, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d: can't find %s: %w", pid, f.pidPath(pid), err)
	}
	st, err := p.Stat()
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d: can't read %s: %w", pid, f.pidPath(pid, "stat"), err)
	}
	return statOf(st), nil
}

// TaskStat reads /proc/PID/task/TID/stat.
func (f FS) TaskStat(pid, tid int) (Stat, error) {
	t, err := f.fs.Thread(pid, tid)
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d tid %d: can't find %s: %w", pid, tid, f.taskPath(pid, tid), err)
	}
	st, err := t.Stat()
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d tid %d: can't read %s: %w", pid, tid, f.taskPath(pid, tid, "stat"), err)
	}
	return statOf(st), nil
}
