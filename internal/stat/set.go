package stat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/session"
)

// SetStat is stat's document for a set of processes (several -p,
// --children, --cgroup, --all): one line per process, the set as one
// (sums over its processes, every thread, the target's cgroup) and the
// verdicts over the whole set.
type SetStat struct {
	Schema   int     `json:"schema"`
	Kind     string  `json:"kind"` // "process-set"
	Mode     string  `json:"mode"` // window | run
	WindowS  float64 `json:"window_s"`
	ExitCode *int    `json:"exit_code,omitempty"`
	// Processes: every process that was a member during the window, in
	// the order they joined.
	Processes []ProcStat `json:"processes"`
	Account   Account    `json:"account"`
	// Total is the set measured as one process would be: counters summed
	// over the processes (each from its join to the window's end or its
	// exit: CPU whole when a member parent reaped it, the rest as of the
	// last poll before it), gauges summed over those alive at the
	// end, every thread; its verdicts are the set's.
	Total    *report.Stat `json:"total"`
	Verdicts []string     `json:"verdicts"`
	Notes    []string     `json:"notes"`
}

// ProcStat is one process of the set over the window.
type ProcStat struct {
	Pid    int         `json:"pid"`
	Parent int         `json:"parent,omitempty"`
	How    procset.How `json:"how"` // seed, fork (a descendant of a member), cgroup
	Argv   []string    `json:"argv,omitempty"`
	Comm   string      `json:"comm"`
	// JoinedNs: when pyobs found it, in ns since the window's start (0:
	// a member from the start); Born: it started inside the window, so
	// all of its CPU is counted, not only what followed its discovery.
	JoinedNs int64 `json:"joined_ns"`
	Born     bool  `json:"born_in_window,omitempty"`
	Exited   bool  `json:"exited"`
	// ExitedNs: the first poll that found it gone, ns since the start;
	// its numbers are those of the poll before.
	ExitedNs      int64   `json:"exited_ns,omitempty"`
	Refused       string  `json:"refused,omitempty"`
	Utilization   float64 `json:"utilization"` // cores over the whole window
	UserS         float64 `json:"user_s"`
	SystemS       float64 `json:"system_s"`
	RunqueueWaitS float64 `json:"runqueue_wait_s"`
	Voluntary     uint64  `json:"voluntary_ctxt_switches"`
	Nonvoluntary  uint64  `json:"nonvoluntary_ctxt_switches"`
	MinorFaults   uint64  `json:"minor_faults"`
	MajorFaults   uint64  `json:"major_faults"`
	RSSBytes      uint64  `json:"rss_bytes"` // at the end (at the last poll for an exited one)
	PSSBytes      *uint64 `json:"pss_bytes,omitempty"`
	Threads       int     `json:"threads"`
	State         string  `json:"state"` // the main thread's, at the end; "exited"
	// Stopped: its threads seen stopped by someone else during the
	// window (the set's watch: every 100 ms); absent when never.
	Stopped *report.Stopped `json:"stopped,omitempty"`
}

// Account counts the set's processes.
type Account struct {
	Seen    int `json:"seen"`
	Late    int `json:"joined_late"` // found after the window's start
	Exited  int `json:"exited"`
	Refused int `json:"refused"` // could not be read at all
}

// member is one process of the set as the set meter follows it.
type member struct {
	pid, parent int
	how         procset.How
	argv        []string
	joined      time.Duration
	late, born  bool
	a, last     *procfs.Sample
	exited      bool
	exitedAt    time.Duration
	refused     string
}

// setMeter polls a set: its members' samples, and who joins and leaves.
type setMeter struct {
	*meter
	fs         procfs.FS
	start      time.Time
	startTicks uint64 // the window's start in the kernel's start-time unit
	byPid      map[int]*member
	order      []*member
	seeds      []int
	perfAsked  bool // the caller did not say NoPerf: the report says why there are none
	allGone    bool // every member exited before the window's end
	end        time.Time
	cgB        *procfs.CgroupCPU
	psB        procfs.Pressure
	// watch looks at the living members' thread states over the window
	// (live: its list, published after each poll: the watch reads it
	// from its own goroutine); each: its per-process accounts at the end.
	watch  *procfs.StopWatch
	liveMu sync.Mutex
	live   []int
	each   map[int]*procfs.Stops
}

// RunSet measures the session's set: one window of opt.Duration (cut
// short by ctx) for attached processes, or a spawned command and its
// children from opt.Started until the command exits. Members are found
// at the start and at every poll (opt.Poll): with Children the
// descendants of every member, with a cgroup its processes.
func RunSet(ctx context.Context, s *session.Session, opt Options) (*SetStat, error) {
	o := opt
	o.NoPerf = true // inherited counters would count a member's children twice
	m := &setMeter{meter: newMeter(s, o), fs: s.FS, byPid: map[int]*member{}, perfAsked: !opt.NoPerf}
	defer m.close()
	m.seeds = append([]int{s.Pid}, s.Set.Pids...)
	if s.Spawned() {
		return m.runSet(ctx, opt)
	}
	return m.windowSet(ctx, opt)
}

// publish makes the living members the stop watch's list.
func (m *setMeter) publish() {
	var l []int
	for _, mb := range m.order {
		if !mb.exited && mb.refused == "" {
			l = append(l, mb.pid)
		}
	}
	m.liveMu.Lock()
	m.live = l
	m.liveMu.Unlock()
}

func (m *setMeter) livePids() []int {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return m.live
}

// startWatch begins the window's look at the members' stops.
func (m *setMeter) startWatch() {
	m.publish()
	m.watch = procfs.WatchStopsOf(m.fs, m.livePids, true)
}

// endWatch ends it: the set's account (the total's) and each process's.
func (m *setMeter) endWatch() {
	if m.watch == nil {
		m.stops, m.each = nil, nil // none watched: none said (never the last window's)
		return
	}
	m.publish()
	m.stops = m.watch.End()
	m.each = m.watch.Each()
	m.watch = nil
}

// bootTicks is CLOCK_BOOTTIME at t in UserHZ ticks, the unit and clock of
// a process's start time in /proc/PID/stat.
func bootTicks(t time.Time) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	now := time.Duration(ts.Nano()) - time.Since(t)
	if now < 0 {
		return 0
	}
	return uint64(now / (time.Second / procfs.UserHZ))
}

// discover adds the processes that are members now and were not yet:
// the seeds, the cgroup's processes, the descendants of every member.
func (m *setMeter) discover(now time.Time, initial bool) {
	defer m.publish()
	for _, p := range m.seeds {
		how := procset.Seed
		if m.s.Set.Cgroup != "" && p != m.s.Pid {
			how = procset.Cgroup
		}
		m.join(p, 0, how, now, initial)
	}
	if dir := m.s.Set.Cgroup; dir != "" {
		pids, _ := procfs.CgroupProcs(dir)
		for _, p := range pids {
			m.join(p, 0, procset.Cgroup, now, initial)
		}
	}
	if !m.s.Set.Children {
		return
	}
	pids, err := m.fs.Pids()
	if err != nil {
		return
	}
	kids := map[int][]int{}
	for _, p := range pids {
		if _, ok := m.byPid[p]; ok {
			continue
		}
		if pp, err := m.fs.Ppid(p); err == nil {
			kids[pp] = append(kids[pp], p)
		}
	}
	var queue []int
	for _, mb := range m.order {
		if !mb.exited {
			queue = append(queue, mb.pid)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			if m.join(k, p, procset.Fork, now, initial) {
				queue = append(queue, k)
			}
		}
	}
}

// join makes pid a member (reporting whether it is one now): its first
// sample is its window's start when it was there at the start or moved
// in later; a process born inside the window counts from zero.
func (m *setMeter) join(pid, parent int, how procset.How, now time.Time, initial bool) bool {
	if _, ok := m.byPid[pid]; ok || pid <= 0 {
		return ok
	}
	sn, err := m.fs.Sample(pid, procfs.SampleOptions{Threads: true})
	if err != nil && errors.Is(err, procfs.ErrNoProcess) && !(initial && how == procset.Seed) {
		return false // gone before it was seen: not a member
	}
	mb := &member{pid: pid, parent: parent, how: how, joined: now.Sub(m.start), late: !initial}
	if mb.parent == 0 {
		mb.parent, _ = m.fs.Ppid(pid)
	}
	mb.argv, _ = m.fs.Cmdline(pid)
	m.byPid[pid] = mb
	m.order = append(m.order, mb)
	if err != nil {
		mb.refused = err.Error()
		return true
	}
	m.observe(sn)
	mb.last = sn
	mb.a = sn
	if sn.StartTicks >= m.startTicks {
		mb.born = true
		mb.a = &procfs.Sample{Time: m.start, Pid: pid, Comm: sn.Comm, StartTicks: sn.StartTicks, HasIO: sn.HasIO, HasStatus: sn.HasStatus}
	}
	return true
}

// poll reads every living member and finds the new ones. Children are
// read before their parents (the reverse of the join order): a child
// reaped between the two reads is then gone and already in its parent's
// cutime, so settle can credit it.
func (m *setMeter) poll(now time.Time) {
	prev := map[int]*procfs.Sample{}
	var gone []*member
	for i := len(m.order) - 1; i >= 0; i-- {
		mb := m.order[i]
		if mb.exited || mb.refused != "" {
			continue
		}
		sn, err := m.fs.Sample(mb.pid, procfs.SampleOptions{Threads: true})
		if err != nil {
			mb.exited, mb.exitedAt = true, now.Sub(m.start)
			gone = append(gone, mb)
			continue
		}
		if mb.last != nil && sn.Comm != mb.last.Comm { // exec'd: its new command line
			if argv, err := m.fs.Cmdline(mb.pid); err == nil && len(argv) > 0 {
				mb.argv = argv
			}
		}
		m.observe(sn)
		prev[mb.pid] = mb.last
		mb.last = sn
	}
	settle(gone, m.byPid, prev, now)
	m.discover(now, false)
}

// settle credits the members found gone at this poll with the CPU they
// used after their last read. A parent that is a living member, read at
// this poll and the one before, has reaped them meanwhile: the kernel
// added each one's whole CPU (with that of the children it reaped) to the
// parent's cutime and cstime. What those grew by, less what the gone ones
// (and their gone descendants, counted on their own lines) had at their
// last read, is the rest; several children of one parent share it evenly.
// A child's share is capped at its threads running for the whole time
// since its last read, so a child the polls missed, reaped in the same
// interval, cannot lend it much. A parent that exited too, or that does
// not reap (SIGCHLD ignored), leaves its children as they were read.
func settle(gone []*member, byPid map[int]*member, prev map[int]*procfs.Sample, now time.Time) {
	isGone := map[int]bool{}
	for _, g := range gone {
		if g.last != nil {
			isGone[g.pid] = true
		}
	}
	reaper := func(g *member) int { // the first ancestor not gone
		p := g.parent
		for isGone[p] && byPid[p] != nil {
			p = byPid[p].parent
		}
		return p
	}
	subtree, direct := map[int][]*member{}, map[int][]*member{}
	for _, g := range gone {
		if !isGone[g.pid] {
			continue
		}
		r := reaper(g)
		subtree[r] = append(subtree[r], g)
		if g.parent == r {
			direct[r] = append(direct[r], g)
		}
	}
	for r, kids := range direct {
		pm, before := byPid[r], prev[r]
		if pm == nil || pm.exited || pm.last == nil || before == nil {
			continue
		}
		du := int64(pm.last.CUTimeTicks) - int64(before.CUTimeTicks)
		ds := int64(pm.last.CSTimeTicks) - int64(before.CSTimeTicks)
		for _, g := range subtree[r] {
			du -= int64(g.last.UTimeTicks + g.last.CUTimeTicks)
			ds -= int64(g.last.STimeTicks + g.last.CSTimeTicks)
		}
		du, ds = max(du, 0)/int64(len(kids)), max(ds, 0)/int64(len(kids))
		for _, g := range kids {
			limit := int64(now.Sub(g.last.Time)*time.Duration(max(g.last.NumThreads, 1))/(time.Second/procfs.UserHZ)) + 1
			u := min(du, limit)
			sn := *g.last
			sn.UTimeTicks += uint64(u)
			sn.STimeTicks += uint64(min(ds, limit-u))
			g.last = &sn
		}
	}
}

// windowSet measures attached processes over opt.Duration.
func (m *setMeter) windowSet(ctx context.Context, opt Options) (*SetStat, error) {
	cgA, psA, err := m.begin()
	if err != nil {
		return nil, err
	}
	early := m.measure(ctx, m.start.Add(opt.Duration))
	return m.finish("window", early, cgA, psA), nil
}

// StreamSet reports the set every opt.Interval to emit until ctx ends,
// opt.Duration passes (when > 0), every process is gone, or emit fails
// (its error is returned). Each report covers its interval: the processes
// alive at its start and those that joined during it. For attached
// processes.
func StreamSet(ctx context.Context, s *session.Session, opt Options, emit func(*SetStat) error) error {
	o := opt
	o.NoPerf = true
	m := &setMeter{meter: newMeter(s, o), fs: s.FS, byPid: map[int]*member{}, perfAsked: !opt.NoPerf}
	defer m.close()
	m.seeds = append([]int{s.Pid}, s.Set.Pids...)
	var stop time.Time
	if opt.Duration > 0 {
		stop = time.Now().Add(opt.Duration)
	}
	cgA, psA, err := m.begin()
	if err != nil {
		return err
	}
	for {
		deadline := m.start.Add(opt.Interval)
		if !stop.IsZero() && stop.Before(deadline) {
			deadline = stop
		}
		early := m.measure(ctx, deadline)
		st := m.finish("interval", early, cgA, psA)
		last := early || m.allGone || (!stop.IsZero() && !time.Now().Before(stop))
		if !last {
			m.startWatch() // the next interval's stops, from where this one's ended (not after the emit)
		}
		if err := emit(st); err != nil {
			m.endWatch()
			return err
		}
		if last {
			return nil
		}
		cgA, psA = m.next()
	}
}

// begin starts a window: the members now, and the cgroup's counters.
func (m *setMeter) begin() (*procfs.CgroupCPU, procfs.Pressure, error) {
	m.start = time.Now()
	m.startTicks = bootTicks(m.start)
	cgA, psA := m.cgroupNow()
	m.discover(m.start, true)
	if m.readable() == 0 {
		if _, err := m.fs.Sample(m.s.Pid, procfs.SampleOptions{}); err != nil {
			return nil, psA, m.s.Explain("read the process", err)
		}
		return nil, psA, fmt.Errorf("can't read any process of the set (pid %d and the others)", m.s.Pid)
	}
	m.startWatch()
	return cgA, psA, nil
}

// measure polls until the deadline, ctx's end (early) or, when nothing
// can join any more, the exit of every member.
func (m *setMeter) measure(ctx context.Context, deadline time.Time) (early bool) {
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(min(wait, m.opt.Poll)):
		}
		if !time.Now().Before(deadline) {
			return false
		}
		m.poll(time.Now())
		if m.s.Set.Cgroup == "" && m.living() == 0 {
			m.allGone = true // nothing left to measure, and nothing can join
			return false
		}
	}
}

// finish ends a window: the last members, their full samples, the report.
func (m *setMeter) finish(mode string, early bool, cgA *procfs.CgroupCPU, psA procfs.Pressure) *SetStat {
	end := time.Now()
	if m.allGone {
		m.notes = append(m.notes, fmt.Sprintf("every process of the set exited: the window ends at %.2f s", end.Sub(m.start).Seconds()))
	}
	m.discover(end, false)
	prev := map[int]*procfs.Sample{}
	var gone []*member
	for i := len(m.order) - 1; i >= 0; i-- { // children first, as in poll
		mb := m.order[i]
		if mb.exited || mb.refused != "" {
			continue
		}
		if argv, err := m.fs.Cmdline(mb.pid); err == nil && len(argv) > 0 {
			mb.argv = argv // what it runs now (a shim that exec'd python)
		}
		sn, err := m.fs.Sample(mb.pid, procfs.SampleOptions{Threads: true, Smaps: true})
		if err != nil {
			mb.exited, mb.exitedAt = true, end.Sub(m.start)
			gone = append(gone, mb)
			continue
		}
		m.observe(sn)
		prev[mb.pid] = mb.last
		mb.last = sn
	}
	settle(gone, m.byPid, prev, end)
	m.endWatch()
	cgB, psB := m.cgroupNow()
	m.cgB, m.psB = cgB, psB
	st := m.build(mode, end, cgA, cgB, psA, psB, nil)
	if early {
		st.Notes = append(st.Notes, fmt.Sprintf("ended early by a signal after %.2f s", end.Sub(m.start).Seconds()))
	}
	m.end = end
	return st
}

// next starts the following interval where the last one ended: the
// living members carry on from their last sample; the exited and refused
// ones leave the report (and are not found again).
func (m *setMeter) next() (*procfs.CgroupCPU, procfs.Pressure) {
	var keep []*member
	for _, mb := range m.order {
		if mb.exited || mb.refused != "" {
			continue
		}
		mb.a, mb.joined, mb.late, mb.born = mb.last, 0, false, false
		keep = append(keep, mb)
	}
	m.order = keep
	m.start = m.end
	m.startTicks = bootTicks(m.start)
	m.resetPolls()
	m.notes = nil
	return m.cgB, m.psB
}

// runSet measures a spawned command and its children until it exits.
func (m *setMeter) runSet(ctx context.Context, opt Options) (*SetStat, error) {
	m.start = opt.Started
	m.startTicks = bootTicks(m.start)
	cgA, psA := m.cgroupNow()
	m.discover(time.Now(), true)
	m.startWatch()
	tick := time.NewTicker(opt.Poll)
	defer tick.Stop()
loop:
	for {
		select {
		case <-m.s.Exited():
			break loop
		case <-ctx.Done():
			<-m.s.Exited() // the caller gives the command its grace, then ends it
			break loop
		case <-tick.C:
			m.poll(time.Now())
			if m.s.Py == nil {
				m.s.TryPython()
			}
			if n := m.s.ThreadNames(); n != nil {
				if m.names == nil {
					m.names = map[int]string{}
				}
				for k, v := range n {
					m.names[k] = v
				}
			}
		}
	}
	end := time.Now()
	m.poll(end) // the command is gone; its children may live on
	m.endWatch()
	cgB, psB := m.cgroupNow()
	code := m.s.ExitCode()
	st := m.build("run", end, cgA, cgB, psA, psB, m.s.Rusage())
	st.ExitCode = &code
	st.Total.ExitCode = &code
	return st, nil
}

func (m *setMeter) cgroupNow() (*procfs.CgroupCPU, procfs.Pressure) {
	var cg *procfs.CgroupCPU
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			cg = &c
		}
	}
	return cg, m.cg.ReadPressure(m.place)
}

func (m *setMeter) living() int {
	n := 0
	for _, mb := range m.order {
		if !mb.exited && mb.refused == "" {
			n++
		}
	}
	return n
}

func (m *setMeter) readable() int {
	n := 0
	for _, mb := range m.order {
		if mb.refused == "" {
			n++
		}
	}
	return n
}

// build turns the members' samples into the document.
func (m *setMeter) build(mode string, end time.Time, cgA, cgB *procfs.CgroupCPU, psA, psB procfs.Pressure, ru *syscall.Rusage) *SetStat {
	wall := end.Sub(m.start)
	st := &SetStat{Schema: report.StatSchema, Kind: "process-set", Mode: mode, WindowS: round6(wall.Seconds()),
		Processes: []ProcStat{}, Notes: []string{}}
	sumA := &procfs.Sample{Time: m.start, Pid: m.s.Pid}
	sumB := &procfs.Sample{Time: end, Pid: m.s.Pid, FDSoft: ^uint64(0)}
	allSmaps, allIO, live := true, true, 0
	for _, mb := range m.order {
		ps := ProcStat{Pid: mb.pid, Parent: mb.parent, How: mb.how, Argv: mb.argv, JoinedNs: int64(mb.joined), Born: mb.born,
			Exited: mb.exited, Refused: mb.refused, Stopped: report.StoppedOf(m.each[mb.pid], wall.Seconds())}
		if mb.exited {
			ps.ExitedNs = int64(mb.exitedAt)
		}
		st.Account.Seen++
		if mb.late {
			st.Account.Late++
		}
		if mb.exited {
			st.Account.Exited++
		}
		if mb.refused != "" {
			st.Account.Refused++
			st.Processes = append(st.Processes, ps)
			continue
		}
		a, b := mb.a, mb.last
		one := report.Build(report.Input{Pid: mb.pid, Mode: mode, A: a, B: b, Complete: !mb.exited, States: m.states, DNotIO: m.dNotIO, Wchans: m.wchans, OnlineCPUs: m.cpus})
		ps.Comm = b.Comm
		ps.UserS, ps.SystemS = one.CPU.UserS, one.CPU.SystemS
		if wall > 0 {
			ps.Utilization = round4((ps.UserS + ps.SystemS) / wall.Seconds())
		}
		ps.RunqueueWaitS = one.Sched.RunqueueWaitS
		ps.Voluntary, ps.Nonvoluntary = one.Sched.Voluntary, one.Sched.Nonvoluntary
		ps.MinorFaults, ps.MajorFaults = one.Memory.MinorFaults, one.Memory.MajorFaults
		ps.RSSBytes, ps.PSSBytes, ps.Threads = b.VmRSS, one.Memory.PSSBytes, len(b.Threads)
		ps.State = "exited"
		if !mb.exited {
			ps.State = procfs.TaskState{Tid: mb.pid, State: b.State}.Describe()
			for _, t := range b.Threads {
				if t.Tid == mb.pid {
					ps.State = procfs.TaskState{Tid: t.Tid, State: t.State, Wchan: t.Wchan, Syscall: t.Syscall}.Describe()
				}
			}
		}
		st.Processes = append(st.Processes, ps)
		addSample(sumA, a, true)
		addSample(sumB, b, !mb.exited)
		if !mb.exited {
			live++
			allSmaps = allSmaps && b.HasSmaps
		}
		allIO = allIO && a.HasIO == b.HasIO && b.HasIO
	}
	sumB.HasSmaps, sumB.HasIO, sumA.HasIO = allSmaps && live > 0, allIO, allIO
	if first := m.byPid[m.s.Pid]; first != nil && first.last != nil {
		sumB.Comm = first.last.Comm
	}
	in := report.Input{Pid: m.s.Pid, Mode: mode, A: sumA, B: sumB, Complete: true, Place: m.place,
		CgA: cgA, CgB: cgB, CgErr: m.cgErr, PsA: psA, PsB: psB, Names: m.names, Python: m.s.Py != nil,
		NoGIL: m.s.Py != nil && m.s.Py.FreeThreaded(), States: m.states, DNotIO: m.dNotIO, Wchans: m.wchans,
		OnlineCPUs: m.cpus, DelayAcct: m.delay, Notes: m.notes, Stopped: m.stops}
	for _, mb := range m.order {
		if m.each[mb.pid] != nil {
			in.StoppedPids = append(in.StoppedPids, mb.pid)
		}
	}
	if ru != nil {
		in.Rusage = ru
		st.Notes = append(st.Notes, "the total's CPU, faults and switches are wait4's: the command and the children it waited for")
	}
	if m.perfAsked {
		st.Notes = append(st.Notes, "perf counters are not opened on a set (a member's counters inherit its children: they would count twice); stat -p PID counts one process")
	}
	if m.s.Set.Children {
		st.Notes = append(st.Notes, fmt.Sprintf("children are found by polling /proc every %v: a child that lives less than that can be missed, and an exited one counts up to its last poll, plus the rest its parent's cutime/cstime shows when the parent is a member that reaped it", m.opt.Poll))
	} else if m.s.Set.Cgroup != "" {
		st.Notes = append(st.Notes, fmt.Sprintf("the cgroup's processes are polled every %v: one that lives less than that can be missed, and an exited one counts up to its last poll, plus the rest its parent's cutime/cstime shows when the parent is a member that reaped it", m.opt.Poll))
	}
	if t := m.byPid[m.s.Pid]; t != nil && t.exited && mode == "window" {
		st.Notes = append(st.Notes, fmt.Sprintf("pid %d exited during the window", m.s.Pid))
	}
	if m.place.Version != 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("cgroup throttling and pressure are those of pid %d's cgroup", m.s.Pid))
	}
	st.Total = report.Build(in)
	flags := setFlags(m.s)
	for i := range st.Total.Findings {
		f := &st.Total.Findings[i]
		f.Next = strings.Replace(f.Next, fmt.Sprintf("-p %d", m.s.Pid), flags, 1)
	}
	st.Verdicts = st.Total.Verdicts
	return st
}

// setFlags names the set on a command line, for the verdicts' next steps.
func setFlags(s *session.Session) string {
	switch {
	case s.Set.Cgroup != "":
		return "--cgroup " + s.Set.Cgroup
	case s.Set.All:
		return "--all"
	}
	pids := []string{fmt.Sprint(s.Pid)}
	for _, p := range s.Set.Pids {
		if p != s.Pid {
			pids = append(pids, fmt.Sprint(p))
		}
	}
	f := "-p " + strings.Join(pids, ",")
	if s.Set.Children {
		f += " --children"
	}
	return f
}

// addSample adds one process's sample to the set's: counters always,
// gauges when the process is there (not for one that exited).
func addSample(sum, p *procfs.Sample, gauges bool) {
	sum.UTimeTicks += p.UTimeTicks
	sum.STimeTicks += p.STimeTicks
	sum.MinFlt += p.MinFlt
	sum.MajFlt += p.MajFlt
	sum.VoluntaryCtxt += p.VoluntaryCtxt
	sum.NonVolCtxt += p.NonVolCtxt
	sum.HasStatus = sum.HasStatus || p.HasStatus
	sum.IO.RChar += p.IO.RChar
	sum.IO.WChar += p.IO.WChar
	sum.IO.SyscR += p.IO.SyscR
	sum.IO.SyscW += p.IO.SyscW
	sum.IO.ReadBytes += p.IO.ReadBytes
	sum.IO.WriteBytes += p.IO.WriteBytes
	sum.IO.CancelledWriteBytes += p.IO.CancelledWriteBytes
	sum.Threads = append(sum.Threads, p.Threads...)
	if !gauges {
		return
	}
	sum.NumThreads += p.NumThreads
	sum.VmRSS += p.VmRSS
	sum.VmHWM += p.VmHWM
	sum.VmSwap += p.VmSwap
	sum.RssAnon += p.RssAnon
	sum.RssFile += p.RssFile
	sum.RssShmem += p.RssShmem
	sum.FDs += p.FDs
	sm := &sum.Smaps
	sm.Rss += p.Smaps.Rss
	sm.Pss += p.Smaps.Pss
	sm.PssAnon += p.Smaps.PssAnon
	sm.PssFile += p.Smaps.PssFile
	sm.PssShmem += p.Smaps.PssShmem
	sm.Swap += p.Smaps.Swap
	sm.SwapPss += p.Smaps.SwapPss
	sm.HasPssSplit = p.Smaps.HasPssSplit
	if p.State != "" && sum.State == "" {
		sum.State = p.State
	}
}

func round4(x float64) float64 { return float64(int64(x*1e4+0.5)) / 1e4 }
func round6(x float64) float64 { return float64(int64(x*1e6+0.5)) / 1e6 }
