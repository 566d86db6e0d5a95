package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// UserHZ is the unit of utime/stime in /proc/PID/stat (USER_HZ, 100 on
// every Linux ABI that matters).
const UserHZ = 100

// Sample is what `stat` reads about one process at one moment: counters
// (to be subtracted between two samples) and gauges. Files that could not
// be read are named in Missing; their fields stay zero and their Has* flag false.
type Sample struct {
	Time  time.Time
	Pid   int
	Comm  string
	State string

	UTimeTicks, STimeTicks uint64 // all threads, living and dead (thread_group_cputime)
	// CUTimeTicks, CSTimeTicks: the children it reaped (and those they
	// reaped in turn), whole, added by the kernel as each is waited for.
	CUTimeTicks, CSTimeTicks uint64
	MinFlt, MajFlt           uint64
	NumThreads               int
	StartTicks               uint64 // when the process started, in UserHZ ticks since boot (CLOCK_BOOTTIME)

	HasStatus                  bool
	VoluntaryCtxt, NonVolCtxt  uint64 // the leader thread only (per-task in /proc/PID/status): sum Threads instead
	VmRSS, VmHWM, VmSwap       uint64 // bytes
	RssAnon, RssFile, RssShmem uint64 // bytes
	HasSmaps                   bool
	Smaps                      SmapsRollup
	HasIO                      bool
	IO                         IOCounters
	HasFDs                     bool
	FDs                        int
	FDSoft, FDHard             uint64 // RLIMIT_NOFILE; math.MaxUint64 = unlimited
	Threads                    []TaskSample
	Missing                    []string // "io: permission denied", …
}

// IOCounters is /proc/PID/io: rchar/wchar count every read/write syscall's
// bytes (page cache hits included), read_bytes/write_bytes what reached the
// block layer.
type IOCounters struct {
	RChar, WChar, SyscR, SyscW uint64
	ReadBytes, WriteBytes      uint64
	CancelledWriteBytes        uint64
}

// TaskSample is one thread (task/TID).
type TaskSample struct {
	Tid     int
	Comm    string
	State   string
	Wchan   string
	Syscall int // -1 running in user space, -2 unknown
	// DLeft: seen in D, but out of D when read again after its call:
	// Syscall is not the call it waited in (a vfork seen ending).
	DLeft                  bool
	Processor              int
	UTimeTicks, STimeTicks uint64
	MinFlt, MajFlt         uint64
	HasStatus              bool
	VoluntaryCtxt          uint64
	NonVolCtxt             uint64
	HasSched               bool
	RunNs, WaitNs          uint64 // schedstat: on-CPU time, run-queue wait
	Timeslices             uint64
}

// SampleOptions choose the costlier reads.
type SampleOptions struct {
	Smaps   bool // smaps_rollup walks every mapping under mmap_lock
	Threads bool
}

// Sample reads the process. Only a process that is gone (or a zombie,
// whose counters are frozen) is an error (wrapping ErrNoProcess); anything
// else missing is listed in Missing.
func (f FS) Sample(pid int, opt SampleOptions) (*Sample, error) {
	s := &Sample{Time: time.Now(), Pid: pid}
	p, err := f.fs.Proc(pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	st, err := p.Stat()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("can't read /proc/%d/stat: %w", pid, err)
	}
	s.Comm, s.State, s.NumThreads = st.Comm, st.State, st.NumThreads
	s.UTimeTicks, s.STimeTicks = uint64(st.UTime), uint64(st.STime)
	s.CUTimeTicks, s.CSTimeTicks = uint64(max(st.CUTime, 0)), uint64(max(st.CSTime, 0))
	s.MinFlt, s.MajFlt = uint64(st.MinFlt), uint64(st.MajFlt)
	s.StartTicks = st.Starttime
	via := pid
	if deadState(s.State) {
		// Its main thread exited: alive while another thread is, and read
		// through that one (the leader's status, io, fd are empty or refused;
		// the stat above counts the whole process still).
		tid, ok := f.liveThread(pid)
		if !ok {
			return s, fmt.Errorf("pid %d is a zombie: %w", pid, ErrNoProcess)
		}
		t, err := f.fs.Thread(pid, tid)
		if err != nil {
			return s, fmt.Errorf("pid %d is a zombie: %w", pid, ErrNoProcess)
		}
		tst, err := t.Stat()
		if err != nil || deadState(tst.State) {
			return s, fmt.Errorf("pid %d is a zombie: %w", pid, ErrNoProcess)
		}
		s.State, via = tst.State, tid
		if p, err = f.fs.Proc(tid); err != nil {
			return s, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
	}
	miss := func(what string, err error) {
		s.Missing = append(s.Missing, fmt.Sprintf("%s: %s", what, shortErr(err)))
	}
	if ps, err := p.NewStatus(); err == nil {
		s.HasStatus = true
		s.VoluntaryCtxt, s.NonVolCtxt = ps.VoluntaryCtxtSwitches, ps.NonVoluntaryCtxtSwitches
		s.VmRSS, s.VmHWM, s.VmSwap = ps.VmRSS, ps.VmHWM, ps.VmSwap
		s.RssAnon, s.RssFile, s.RssShmem = ps.RssAnon, ps.RssFile, ps.RssShmem
	} else {
		miss("status", err)
	}
	if opt.Smaps {
		path := filepath.Join(f.root, strconv.Itoa(via), "smaps_rollup")
		if fh, err := os.Open(path); err == nil {
			sm, perr := ParseSmapsRollup(fh)
			fh.Close()
			if perr == nil {
				s.Smaps, s.HasSmaps = sm, true
			} else {
				miss("smaps_rollup", perr)
			}
		} else {
			miss("smaps_rollup", err)
		}
	}
	if io, err := p.IO(); err == nil {
		s.IO, s.HasIO = IOCounters{RChar: io.RChar, WChar: io.WChar, SyscR: io.SyscR, SyscW: io.SyscW,
			ReadBytes: io.ReadBytes, WriteBytes: io.WriteBytes, CancelledWriteBytes: uint64(max(io.CancelledWriteBytes, 0))}, true
	} else {
		miss("io", err)
	}
	if n, err := p.FileDescriptorsLen(); err == nil {
		s.FDs, s.HasFDs = n, true
	} else {
		miss("fd", err)
	}
	if soft, hard, err := f.nofile(via); err == nil {
		s.FDSoft, s.FDHard = soft, hard
	} else {
		miss("limits", err)
	}
	if opt.Threads {
		tids, err := f.Tasks(pid)
		if err != nil {
			miss("task", err)
		}
		for _, tid := range tids {
			ts, err := f.TaskSample(pid, tid)
			if err != nil {
				continue // the thread exited between the listing and the read
			}
			s.Threads = append(s.Threads, ts)
		}
	}
	return s, nil
}

// TaskSample reads task/TID/{stat,status,schedstat,wchan,syscall}.
func (f FS) TaskSample(pid, tid int) (TaskSample, error) {
	t, err := f.fs.Thread(pid, tid)
	if err != nil {
		return TaskSample{}, fmt.Errorf("pid %d tid %d: %w", pid, tid, err)
	}
	st, err := t.Stat()
	if err != nil {
		return TaskSample{}, fmt.Errorf("can't read /proc/%d/task/%d/stat: %w", pid, tid, err)
	}
	ts := TaskSample{Tid: tid, Comm: st.Comm, State: st.State, Syscall: -2, Processor: int(st.Processor),
		UTimeTicks: uint64(st.UTime), STimeTicks: uint64(st.STime),
		MinFlt: uint64(st.MinFlt), MajFlt: uint64(st.MajFlt)}
	if ps, err := t.NewStatus(); err == nil {
		ts.HasStatus = true
		ts.VoluntaryCtxt, ts.NonVolCtxt = ps.VoluntaryCtxtSwitches, ps.NonVoluntaryCtxtSwitches
	}
	if sc, err := f.TaskSchedstat(pid, tid); err == nil {
		ts.HasSched = true
		ts.RunNs, ts.WaitNs, ts.Timeslices = sc.RunNs, sc.WaitNs, sc.Timeslices
	}
	if ts.State != "R" {
		if w, err := t.Wchan(); err == nil && w != "0" {
			ts.Wchan = w
		}
	}
	if sc, err := f.TaskSyscall(pid, tid); err == nil {
		ts.Syscall = sc.Nr
	}
	if ts.State == "D" {
		if again, err := t.Stat(); err == nil && again.State != "D" {
			ts.DLeft = true
		}
	}
	return ts, nil
}

// nofile reads RLIMIT_NOFILE (soft, hard) from /proc/PID/limits.
func (f FS) nofile(pid int) (uint64, uint64, error) {
	b, err := os.ReadFile(filepath.Join(f.root, strconv.Itoa(pid), "limits"))
	if err != nil {
		return 0, 0, err
	}
	return ParseNofile(string(b))
}

func shortErr(err error) string {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file (older kernel, or the process exited)"
	}
	return err.Error()
}
