package report

import (
	"fmt"
	"math"
	"sort"
	"syscall"
	"time"

	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
)

// StatSchema is the version of the stat JSON document.
const StatSchema = 1

// Stat is `pyobs stat`'s document: counters are deltas over the window.
type Stat struct {
	Schema   int       `json:"schema"`
	Pid      int       `json:"pid"`
	Comm     string    `json:"comm"`
	Mode     string    `json:"mode"` // window | interval | run
	WindowS  float64   `json:"window_s"`
	Complete bool      `json:"complete"` // false: the target exited before the window ended
	ExitCode *int      `json:"exit_code,omitempty"`
	Notes    []string  `json:"notes"`
	CPU      CPU       `json:"cpu"`
	Sched    Sched     `json:"sched"`
	Memory   Memory    `json:"memory"`
	IO       IO        `json:"io"`
	Cgroup   Cgroup    `json:"cgroup"`
	Pressure Pressure  `json:"pressure"`
	Counters []Counter `json:"counters"`
	// CountersWindowS: the counters' own window when it is not window_s:
	// the target exited mid-window, so they counted to its exit, past the
	// last /proc read that ends window_s.
	CountersWindowS *float64 `json:"counters_window_s,omitempty"`
	Ratios          Ratios   `json:"ratios"`
	Threads         []Thread `json:"threads"`
	// Stopped: threads seen stopped by someone else (a signal, job
	// control, a tracer) during the window; nil when none was.
	Stopped  *Stopped  `json:"stopped,omitempty"`
	Verdicts []string  `json:"verdicts"`
	Findings []Finding `json:"findings"`
}

// CPU time over the window.
type CPU struct {
	Utilization float64 `json:"utilization"` // cores: CPU seconds per wall second
	UserS       float64 `json:"user_s"`
	SystemS     float64 `json:"system_s"`
	OnlineCPUs  int     `json:"online_cpus"`
}

// Sched is the scheduler's view.
type Sched struct {
	Voluntary      uint64  `json:"voluntary_ctxt_switches"`
	Nonvoluntary   uint64  `json:"nonvoluntary_ctxt_switches"`
	RunqueueWaitS  float64 `json:"runqueue_wait_s"`
	RunqueueShare  float64 `json:"runqueue_wait_share"` // wait / (on-CPU + wait) of the threads seen
	OnCPUS         float64 `json:"on_cpu_s"`            // schedstat run time of the threads seen
	Timeslices     uint64  `json:"timeslices"`
	DelayAcct      string  `json:"delay_accounting"` // on | off | unknown
	SchedstatAvail bool    `json:"schedstat"`
	// ExitedThreads: threads seen at a poll that exited before the
	// window's end, in the figures above to their last poll (not listed).
	ExitedThreads int `json:"exited_threads,omitempty"`
	// UnseenCPUS: the process's CPU time not in OnCPUS, when large: run
	// by threads that lived between two polls, or after an exited one's
	// last poll (the switch and run-queue figures miss it too).
	UnseenCPUS float64 `json:"unseen_cpu_s,omitempty"`
}

// Memory gauges at the end of the window, faults over it.
type Memory struct {
	RSSBytes      uint64  `json:"rss_bytes"`
	RSSDeltaBytes int64   `json:"rss_delta_bytes"`
	PSSBytes      *uint64 `json:"pss_bytes"`
	PSSAnonBytes  *uint64 `json:"pss_anon_bytes"`
	PSSFileBytes  *uint64 `json:"pss_file_bytes"`
	PSSShmemBytes *uint64 `json:"pss_shmem_bytes"`
	SwapBytes     uint64  `json:"swap_bytes"`
	HWMBytes      uint64  `json:"hwm_bytes"`
	MinorFaults   uint64  `json:"minor_faults"`
	MajorFaults   uint64  `json:"major_faults"`
}

// IO over the window.
type IO struct {
	Available     bool   `json:"available"`
	RcharBytes    uint64 `json:"rchar_bytes"` // read(2) and friends, page cache included
	WcharBytes    uint64 `json:"wchar_bytes"`
	ReadBytes     uint64 `json:"read_bytes"` // reached the block layer
	WriteBytes    uint64 `json:"write_bytes"`
	CancelledWB   uint64 `json:"cancelled_write_bytes"`
	ReadSyscalls  uint64 `json:"syscr"`
	WriteSyscalls uint64 `json:"syscw"`
	FDs           int    `json:"fds"`
	FDLimit       uint64 `json:"fd_limit"` // soft RLIMIT_NOFILE; 0 unknown
}

// Cgroup is the CPU controller of the process's cgroup over the window.
type Cgroup struct {
	Version     int      `json:"version"` // 0: none found
	Path        string   `json:"path"`
	NrPeriods   uint64   `json:"nr_periods"`
	NrThrottled uint64   `json:"nr_throttled"`
	ThrottledS  float64  `json:"throttled_s"`
	QuotaCores  *float64 `json:"quota_cores"` // null: no quota
	QuotaUS     int64    `json:"quota_us"`
	PeriodUS    uint64   `json:"period_us"`
	Error       string   `json:"error,omitempty"`
}

// Pressure is PSI over the window: the share of wall time some (or all)
// runnable tasks of the source were stalled.
type Pressure struct {
	Source string     `json:"source"`
	CPU    *PSIWindow `json:"cpu"`
	Memory *PSIWindow `json:"memory"`
	IO     *PSIWindow `json:"io"`
}

// PSIWindow is one resource.
type PSIWindow struct {
	SomePct   float64  `json:"some_pct"`
	FullPct   *float64 `json:"full_pct"`
	SomeAvg10 float64  `json:"some_avg10"`
}

// Counter is one perf event over the window.
type Counter struct {
	Event      string   `json:"event"`
	Value      *float64 `json:"value"` // null when not supported or not counted
	Raw        uint64   `json:"raw"`
	EnabledNs  uint64   `json:"enabled_ns"`
	RunningNs  uint64   `json:"running_ns"`
	RunningPct float64  `json:"running_pct"`
	Estimate   bool     `json:"estimate"`
	Supported  bool     `json:"supported"`
	Group      int      `json:"group"`
	UserOnly   bool     `json:"user_only,omitempty"`
	Note       string   `json:"note,omitempty"`
}

// Ratios come from counters of one group (null when an input is missing).
type Ratios struct {
	IPC             *float64 `json:"ipc"`
	CacheMissRatio  *float64 `json:"cache_miss_ratio"`
	BranchMissRatio *float64 `json:"branch_miss_ratio"`
	CPUsUtilized    *float64 `json:"task_clock_cpus"` // task-clock / the counters' window
}

// Thread is one thread over the window.
type Thread struct {
	Tid           int     `json:"tid"`
	Name          string  `json:"name"`
	Comm          string  `json:"comm"`
	PythonName    string  `json:"python_name,omitempty"`
	State         string  `json:"state"`
	StateText     string  `json:"state_text"`
	Wchan         string  `json:"wchan,omitempty"`
	States        string  `json:"states_seen"` // e.g. "R:3 S:2" over the polls of the window
	Utilization   float64 `json:"utilization"`
	UserS         float64 `json:"user_s"`
	SystemS       float64 `json:"system_s"`
	Voluntary     uint64  `json:"voluntary_ctxt_switches"`
	Nonvoluntary  uint64  `json:"nonvoluntary_ctxt_switches"`
	RunqueueWaitS float64 `json:"runqueue_wait_s"`
	MinorFaults   uint64  `json:"minor_faults"`
	MajorFaults   uint64  `json:"major_faults"`
	CPU           int     `json:"last_cpu"`
	New           bool    `json:"new"` // created during the window
}

// Stopped is the window's stop by someone else (procfs.StopWatch).
type Stopped struct {
	Threads int     `json:"threads"` // the most threads seen stopped at one look
	Of      int     `json:"of"`      // the threads the target had at that look
	Seconds float64 `json:"seconds"` // at least one thread seen stopped, to a look's period
	Share   float64 `json:"share"`   // of the window
	State   string  `json:"state"`   // T (job control), t (tracer), or "T and t"
	LookMS  int     `json:"look_ms"`
	// A set's total: at that look, its processes with a stopped thread and
	// those looked at, and every process seen stopped in the window.
	Processes int   `json:"processes,omitempty"`
	Members   int   `json:"members,omitempty"`
	Pids      []int `json:"pids,omitempty"`
}

// StoppedOf is a watch's account over a window of wall seconds (nil: no
// stop seen).
func StoppedOf(s *procfs.Stops, wall float64) *Stopped {
	if s == nil {
		return nil
	}
	sec := math.Min(s.Seconds, wall)
	share := 0.0
	if wall > 0 {
		share = round(sec/wall, 4)
	}
	return &Stopped{Threads: s.Threads, Of: s.Of, Seconds: round(sec, 3), Share: share, State: s.State, LookMS: s.LookMS,
		Processes: s.Processes, Members: s.Members}
}

// Finding is a verdict with its evidence.
type Finding struct {
	Code      string             `json:"code"`
	Sentence  string             `json:"sentence"`
	Evidence  map[string]float64 `json:"evidence"`
	Threshold string             `json:"threshold"`
	Next      string             `json:"next"`
}

// Input is what the stat command measured.
type Input struct {
	Pid      int
	Mode     string
	A, B     *procfs.Sample // B: the last good sample; A.Time..B.Time is the window
	Complete bool
	Place    procfs.CgroupPlace
	CgA, CgB *procfs.CgroupCPU
	CgErr    string
	PsA, PsB procfs.Pressure
	Counters []perfevent.Count
	// CountersSpan: how long the counters counted when that is not the
	// window (the target exited mid-window: to its exit); 0: the window.
	CountersSpan time.Duration
	PerfNote     string // why counters are missing or partial
	Names        map[int]string
	Python       bool
	NoGIL        bool                   // a free-threaded interpreter: no GIL to be bound by
	States       map[int]map[string]int // tid → state letter → polls that saw it
	// Exited: threads seen at a poll inside the window and gone at its
	// end (not in B), as that poll read them.
	Exited []procfs.TaskSample
	// DNotIO: tid → polls that saw it in D inside a call that does no I/O
	// (procfs.UninterruptibleNotIO: vfork waiting for its child's exec),
	// or out of D again once its call was read (which call it waited in
	// is not known: not counted as I/O).
	DNotIO      map[int]int
	Wchans      map[int]map[string]int // tid → wchan → polls that saw it (not running)
	Stopped     *procfs.Stops          // the target seen stopped by someone else (nil: never)
	StoppedPids []int                  // a set's: the processes seen stopped (Stopped.Pids)
	OnlineCPUs  int
	DelayAcct   string
	Notes       []string
	Rusage      *syscall.Rusage // run mode: wait4's totals, authoritative for CPU/faults/switches
	ExitCode    *int
}

func secs(ticks uint64) float64 { return float64(ticks) / procfs.UserHZ }

func d(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

func tvSecs(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// Build computes the window and its verdicts.
func Build(in Input) *Stat {
	a, b := in.A, in.B
	wall := b.Time.Sub(a.Time).Seconds()
	st := &Stat{Schema: StatSchema, Pid: in.Pid, Comm: b.Comm, Mode: in.Mode, WindowS: round(wall, 6),
		Complete: in.Complete, ExitCode: in.ExitCode, Notes: append([]string{}, in.Notes...),
		Counters: []Counter{}, Threads: []Thread{}, Verdicts: []string{}, Findings: []Finding{}}
	if wall <= 0 {
		wall = 1e-9
	}
	// CPU
	st.CPU.UserS = secs(d(b.UTimeTicks, a.UTimeTicks))
	st.CPU.SystemS = secs(d(b.STimeTicks, a.STimeTicks))
	st.Sched.Voluntary, st.Sched.Nonvoluntary = d(b.VoluntaryCtxt, a.VoluntaryCtxt), d(b.NonVolCtxt, a.NonVolCtxt)
	st.Memory.MinorFaults, st.Memory.MajorFaults = d(b.MinFlt, a.MinFlt), d(b.MajFlt, a.MajFlt)
	if ru := in.Rusage; ru != nil {
		st.CPU.UserS, st.CPU.SystemS = tvSecs(ru.Utime), tvSecs(ru.Stime)
		st.Sched.Voluntary, st.Sched.Nonvoluntary = uint64(ru.Nvcsw), uint64(ru.Nivcsw)
		st.Memory.MinorFaults, st.Memory.MajorFaults = uint64(ru.Minflt), uint64(ru.Majflt)
		if hwm := uint64(ru.Maxrss) * 1024; hwm > st.Memory.HWMBytes {
			st.Memory.HWMBytes = hwm
		}
	}
	st.CPU.Utilization = round((st.CPU.UserS+st.CPU.SystemS)/wall, 4)
	st.CPU.OnlineCPUs = in.OnlineCPUs
	st.Sched.DelayAcct = in.DelayAcct

	// Memory gauges
	st.Memory.RSSBytes, st.Memory.SwapBytes = b.VmRSS, b.VmSwap
	if b.VmHWM > st.Memory.HWMBytes {
		st.Memory.HWMBytes = b.VmHWM
	}
	st.Memory.RSSDeltaBytes = int64(b.VmRSS) - int64(a.VmRSS)
	if a.VmRSS == 0 {
		st.Memory.RSSDeltaBytes = 0
	}
	if b.HasSmaps {
		sm := b.Smaps
		st.Memory.PSSBytes = &sm.Pss
		if sm.HasPssSplit {
			st.Memory.PSSAnonBytes, st.Memory.PSSFileBytes, st.Memory.PSSShmemBytes = &sm.PssAnon, &sm.PssFile, &sm.PssShmem
		}
		if sm.Swap > st.Memory.SwapBytes {
			st.Memory.SwapBytes = sm.Swap
		}
	}
	// IO
	if b.HasIO {
		st.IO.Available = true
		st.IO.RcharBytes, st.IO.WcharBytes = d(b.IO.RChar, a.IO.RChar), d(b.IO.WChar, a.IO.WChar)
		st.IO.ReadBytes, st.IO.WriteBytes = d(b.IO.ReadBytes, a.IO.ReadBytes), d(b.IO.WriteBytes, a.IO.WriteBytes)
		st.IO.CancelledWB = d(b.IO.CancelledWriteBytes, a.IO.CancelledWriteBytes)
		st.IO.ReadSyscalls, st.IO.WriteSyscalls = d(b.IO.SyscR, a.IO.SyscR), d(b.IO.SyscW, a.IO.SyscW)
	}
	st.IO.FDs = b.FDs
	if b.FDSoft != math.MaxUint64 {
		st.IO.FDLimit = b.FDSoft
	}
	// Threads
	prev := map[int]procfs.TaskSample{}
	for _, t := range a.Threads {
		prev[t.Tid] = t
	}
	anySched := false
	var tvol, tnonvol uint64
	tstatus := len(b.Threads) > 0
	for _, t := range in.Exited {
		// To its last poll: in the sums, not in the list.
		p, ok := prev[t.Tid]
		if t.HasSched && (!ok || p.HasSched) {
			st.Sched.OnCPUS += float64(d(t.RunNs, p.RunNs)) / 1e9
			st.Sched.RunqueueWaitS += float64(d(t.WaitNs, p.WaitNs)) / 1e9
			st.Sched.Timeslices += d(t.Timeslices, p.Timeslices)
		}
		if t.HasStatus {
			tvol, tnonvol = tvol+d(t.VoluntaryCtxt, p.VoluntaryCtxt), tnonvol+d(t.NonVolCtxt, p.NonVolCtxt)
		}
		st.Sched.ExitedThreads++
	}
	for _, t := range b.Threads {
		p, ok := prev[t.Tid]
		th := Thread{Tid: t.Tid, Comm: t.Comm, Name: t.Comm, State: t.State, Wchan: t.Wchan, CPU: t.Processor, New: !ok && in.Mode != "run"}
		if n := in.Names[t.Tid]; n != "" {
			th.PythonName, th.Name = n, n
		}
		th.StateText = procfs.TaskState{Tid: t.Tid, State: t.State, Wchan: t.Wchan, Syscall: t.Syscall}.Describe()
		th.UserS = secs(d(t.UTimeTicks, p.UTimeTicks))
		th.SystemS = secs(d(t.STimeTicks, p.STimeTicks))
		th.Utilization = (th.UserS + th.SystemS) / wall
		if t.HasSched && (!ok || p.HasSched) {
			anySched = true
			run, wait := d(t.RunNs, p.RunNs), d(t.WaitNs, p.WaitNs)
			th.Utilization = float64(run) / 1e9 / wall
			th.RunqueueWaitS = round(float64(wait)/1e9, 6)
			st.Sched.OnCPUS += float64(run) / 1e9
			st.Sched.RunqueueWaitS += float64(wait) / 1e9
			st.Sched.Timeslices += d(t.Timeslices, p.Timeslices)
		}
		th.Utilization = round(th.Utilization, 4)
		th.Voluntary, th.Nonvoluntary = d(t.VoluntaryCtxt, p.VoluntaryCtxt), d(t.NonVolCtxt, p.NonVolCtxt)
		tvol, tnonvol = tvol+th.Voluntary, tnonvol+th.Nonvoluntary
		tstatus = tstatus && t.HasStatus
		th.MinorFaults, th.MajorFaults = d(t.MinFlt, p.MinFlt), d(t.MajFlt, p.MajFlt)
		th.States = statesSeen(in.States[t.Tid])
		st.Threads = append(st.Threads, th)
	}
	st.Sched.SchedstatAvail = anySched
	// /proc/PID/status counts the leader's switches only: sum the threads
	// (those that exited inside the window to their last poll, those that
	// lived between two polls not at all; wait4 has them all in run mode).
	if tstatus && in.Rusage == nil {
		st.Sched.Voluntary, st.Sched.Nonvoluntary = tvol, tnonvol
	}
	st.Sched.OnCPUS = round(st.Sched.OnCPUS, 6)
	st.Sched.RunqueueWaitS = round(st.Sched.RunqueueWaitS, 6)
	if tot := st.Sched.OnCPUS + st.Sched.RunqueueWaitS; tot > 0 {
		st.Sched.RunqueueShare = round(st.Sched.RunqueueWaitS/tot, 4)
	}
	// The process's own CPU time holds its dead threads' (ticks, 10 ms):
	// what the threads' schedstat left out, when it is a real part.
	if cpu := st.CPU.UserS + st.CPU.SystemS; anySched && in.Rusage == nil && cpu-st.Sched.OnCPUS > max(0.1, 0.1*cpu) {
		st.Sched.UnseenCPUS = round(cpu-st.Sched.OnCPUS, 3)
		st.Notes = append(st.Notes, fmt.Sprintf("threads that started and ended between two polls (or ran on after an exited thread's last poll) ran %.3f s of the process's %.3f s of CPU: not in the run-queue and context-switch figures (--poll shorter sees more of them)",
			st.Sched.UnseenCPUS, cpu))
	}
	// cgroup
	st.Cgroup.Version, st.Cgroup.Path, st.Cgroup.Error = in.Place.Version, in.Place.Path, in.CgErr
	st.Cgroup.QuotaUS = -1
	if in.CgB != nil {
		cb := *in.CgB
		ca := procfs.CgroupCPU{}
		if in.CgA != nil {
			ca = *in.CgA
		}
		st.Cgroup.NrPeriods, st.Cgroup.NrThrottled = d(cb.NrPeriods, ca.NrPeriods), d(cb.NrThrottled, ca.NrThrottled)
		st.Cgroup.ThrottledS = round(float64(d(cb.ThrottledNs, ca.ThrottledNs))/1e9, 6)
		st.Cgroup.QuotaUS, st.Cgroup.PeriodUS = cb.QuotaUS, cb.PeriodUS
		if q := cb.QuotaCores(); q > 0 {
			st.Cgroup.QuotaCores = &q
		}
	}
	// PSI
	st.Pressure.Source = in.PsB.Source
	st.Pressure.CPU = psiWindow(in.PsA.CPU, in.PsB.CPU, wall, false)
	st.Pressure.Memory = psiWindow(in.PsA.Memory, in.PsB.Memory, wall, true)
	st.Pressure.IO = psiWindow(in.PsA.IO, in.PsB.IO, wall, true)
	// Counters
	byName := map[string]Counter{}
	for _, c := range in.Counters {
		k := Counter{Event: c.Event, Raw: c.Raw, EnabledNs: c.Enabled, RunningNs: c.Running, Supported: c.Supported,
			Estimate: c.Estimate, Group: c.Group, UserOnly: c.UserOnly, Note: c.Reason}
		if c.Supported {
			k.RunningPct = round(100*c.RunningShare(), 2)
			if c.Enabled == 0 || c.Running > 0 {
				v := round(c.Scaled, 3)
				k.Value = &v
			}
		} else if k.Note == "" {
			k.Note = "not supported"
		}
		st.Counters = append(st.Counters, k)
		byName[c.Event] = k
	}
	st.Ratios.IPC = ratio(byName, "instructions", "cycles")
	st.Ratios.CacheMissRatio = ratio(byName, "cache-misses", "cache-references")
	st.Ratios.BranchMissRatio = ratio(byName, "branch-misses", "branches")
	span := wall
	if in.CountersSpan > 0 {
		// Utilization is task-clock over the time it counted, not over a
		// /proc window that ended before it did.
		span = in.CountersSpan.Seconds()
		w := round(span, 6)
		st.CountersWindowS = &w
	}
	if tc, ok := byName["task-clock"]; ok && tc.Value != nil {
		v := round(*tc.Value/1e9/span, 4)
		st.Ratios.CPUsUtilized = &v
	}
	if in.PerfNote != "" {
		st.Notes = append(st.Notes, in.PerfNote)
	}
	if st.Stopped = StoppedOf(in.Stopped, wall); st.Stopped != nil {
		st.Stopped.Pids = in.StoppedPids
	}
	judge(st, in, wall)
	return st
}

func statesSeen(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%d", k, m[k])
	}
	return s
}

func psiWindow(a, b *procfs.PSI, wall float64, full bool) *PSIWindow {
	if b == nil {
		return nil
	}
	w := &PSIWindow{SomeAvg10: b.Some.Avg10}
	if a != nil {
		w.SomePct = round(math.Min(100, float64(d(b.Some.TotalUS, a.Some.TotalUS))/1e6/wall*100), 2)
		if full && b.HasFull {
			f := round(math.Min(100, float64(d(b.Full.TotalUS, a.Full.TotalUS))/1e6/wall*100), 2)
			w.FullPct = &f
		}
	}
	return w
}

// ratio is num/den when both were counted in the same group.
func ratio(m map[string]Counter, num, den string) *float64 {
	n, ok1 := m[num]
	dd, ok2 := m[den]
	if !ok1 || !ok2 || n.Value == nil || dd.Value == nil || *dd.Value == 0 || n.Group != dd.Group {
		return nil
	}
	v := round(*n.Value / *dd.Value, 4)
	return &v
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// WallOf is a helper for callers: the duration of a window.
func WallOf(a, b *procfs.Sample) time.Duration { return b.Time.Sub(a.Time) }
