package stat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/session"
	"golang.org/x/sys/unix"
)

// Options of a measurement.
type Options struct {
	// Duration is the window (Run on an attached target); for Stream, when
	// > 0, how long to report for (0: until ctx ends or the target exits).
	Duration time.Duration
	// Interval is Stream's report period.
	Interval time.Duration
	// Poll is how often thread states are polled inside a window.
	Poll time.Duration
	// NoPerf leaves the perf counters closed.
	NoPerf bool
	// Started is when a spawned target was started: its whole-run counters
	// count from there.
	Started time.Time
}

// Result is one report: a window, an interval or a spawned command's
// whole run.
type Result struct {
	Stat *report.Stat
	// ExitCode is a spawned command's exit status (128+signal when a
	// signal ended it); 0 for an attached target.
	ExitCode int
}

// Run measures the target: one window of opt.Duration (cut short when ctx
// ends or the target exits) for an attached target; a spawned command from
// opt.Started until it exits. Run does not end a spawned command: when ctx
// ends it waits for the exit, which the caller brings about.
func Run(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	m := newMeter(s, opt)
	defer m.close()
	if s.Spawned() {
		return m.run(ctx)
	}
	st, err := m.window(ctx, opt.Duration)
	if err != nil {
		return nil, err
	}
	return &Result{Stat: st}, nil
}

// Stream reports every opt.Interval to emit until ctx ends, the target
// exits, opt.Duration passes (when > 0) or emit fails (its error is
// returned). For an attached target.
func Stream(ctx context.Context, s *session.Session, opt Options, emit func(*Result) error) error {
	m := newMeter(s, opt)
	defer m.close()
	return m.live(ctx, emit)
}

// meter takes snapshots of one target.
type meter struct {
	s       *session.Session
	opt     Options
	cg      procfs.Cgroups
	place   procfs.CgroupPlace
	cgErr   string
	perf    *perfevent.Set
	perfErr string
	names   map[int]string
	states  map[int]map[string]int
	wchans  map[int]map[string]int
	dNotIO  map[int]int               // polls that saw the thread in D in a call that does no I/O (vfork), or leaving D
	last    map[int]procfs.TaskSample // each thread as the last poll read it
	notes   []string
	cpus    int
	delay   string
	// stops: the target seen stopped by someone else over the window
	// being measured (procfs.StopWatch); nil when it never was.
	stops *procfs.Stops
	// exitAt: when an attached target exited (unix ns, 0: not yet or not
	// known), from its pidfd (watchExit); goneAt: when a read first failed.
	exitAt   atomic.Int64
	exitDone chan struct{}
	goneAt   time.Time
}

type snapshot struct {
	p    *procfs.Sample
	cg   *procfs.CgroupCPU
	ps   procfs.Pressure
	perf perfevent.Reading
}

func newMeter(s *session.Session, opt Options) *meter {
	m := &meter{s: s, opt: opt, cg: procfs.NewCgroups(), cpus: procfs.OnlineCPUs(), delay: procfs.DelayAcct()}
	m.resetPolls()
	if pl, err := m.cg.Locate(s.Pid); err == nil {
		m.place = pl
		if pl.Version == 0 {
			m.cgErr = "(no cgroup hierarchy with the cpu controller is mounted)"
		}
	} else {
		m.cgErr = err.Error()
	}
	if !opt.NoPerf {
		tids, _ := s.FS.Tasks(s.Pid)
		set, err := perfevent.Open(s.Pid, tids, perfevent.DefaultGroups)
		if err != nil {
			m.perfErr = "perf counters unavailable: " + err.Error()
		} else {
			m.perf = set
			if set.Denied != "" {
				m.perfErr = "some perf events were refused by " + set.Denied
			}
			for _, n := range set.Notes {
				m.notes = append(m.notes, "perf: "+n)
			}
		}
	}
	if s.Py != nil {
		m.names = s.ThreadNames()
	}
	if !s.Spawned() && m.perf != nil {
		m.watchExit()
	}
	return m
}

func (m *meter) close() {
	if m.exitDone != nil {
		close(m.exitDone)
	}
	if m.perf != nil {
		m.perf.Close()
	}
}

func (m *meter) resetPolls() {
	m.states = map[int]map[string]int{}
	m.wchans = map[int]map[string]int{}
	m.dNotIO = map[int]int{}
	m.last = map[int]procfs.TaskSample{}
}

// snap reads everything; only a vanished process is an error.
func (m *meter) snap(smaps bool) (*snapshot, error) {
	p, err := m.s.FS.Sample(m.s.Pid, procfs.SampleOptions{Smaps: smaps, Threads: true})
	if err != nil {
		return nil, err
	}
	sn := &snapshot{p: p}
	m.observe(p)
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			sn.cg = &c
		} else {
			m.cgErr = err.Error()
		}
	}
	sn.ps = m.cg.ReadPressure(m.place)
	m.readPerf(sn)
	return sn, nil
}

func (m *meter) readPerf(sn *snapshot) {
	if m.perf == nil {
		return
	}
	r, err := m.perf.Read()
	if err != nil {
		m.perfErr = err.Error()
		return
	}
	sn.perf = r
}

func (m *meter) observe(p *procfs.Sample) {
	for _, t := range p.Threads {
		if m.states[t.Tid] == nil {
			m.states[t.Tid] = map[string]int{}
		}
		m.states[t.Tid][t.State]++
		m.last[t.Tid] = t
		if t.State == "D" && (t.DLeft || procfs.UninterruptibleNotIO(procfs.SyscallName(t.Syscall))) {
			m.dNotIO[t.Tid]++
		}
		if t.State != "R" && t.Wchan != "" {
			if m.wchans[t.Tid] == nil {
				m.wchans[t.Tid] = map[string]int{}
			}
			m.wchans[t.Tid][t.Wchan]++
		}
	}
}

// lightSnap is a poll inside a window: threads and states, no smaps.
func (m *meter) lightSnap() (*snapshot, error) {
	p, err := m.s.FS.Sample(m.s.Pid, procfs.SampleOptions{Threads: true})
	if err != nil {
		return nil, err
	}
	m.observe(p)
	return &snapshot{p: p}, nil
}

func (m *meter) input(mode string, a, b *snapshot, complete bool) report.Input {
	in := report.Input{Pid: m.s.Pid, Mode: mode, A: a.p, B: b.p, Complete: complete, Place: m.place,
		CgA: a.cg, CgB: b.cg, CgErr: m.cgErr, PsA: a.ps, PsB: b.ps, Names: m.names, Python: m.s.Py != nil,
		NoGIL:  m.s.Py != nil && m.s.Py.FreeThreaded(),
		States: m.states, DNotIO: m.dNotIO, Wchans: m.wchans, Stopped: m.stops, OnlineCPUs: m.cpus, DelayAcct: m.delay, Notes: append([]string{}, m.notes...)}
	alive := map[int]bool{}
	for _, t := range b.p.Threads {
		alive[t.Tid] = true
	}
	for tid, t := range m.last {
		if !alive[tid] {
			in.Exited = append(in.Exited, t) // its counts to its last poll
		}
	}
	sort.Slice(in.Exited, func(i, j int) bool { return in.Exited[i].Tid < in.Exited[j].Tid }) // sums in one order
	if m.perf != nil && b.perf.Threads != nil {
		in.Counters = perfevent.Window(a.perf, b.perf)
		if !complete && mode != "run" && a.perf.Threads != nil {
			// The target exited mid-window: /proc's numbers end at the
			// last poll, the counters at the exit (read after it). Each is
			// shown over its own window.
			in.CountersSpan = m.exitTime().Sub(a.p.Time)
		}
	}
	in.PerfNote = m.perfErr
	if m.s.Py == nil {
		in.Notes = append(in.Notes, "thread names are the kernel's (comm): the Python frame walker is not available for this target")
	}
	return in
}

// window measures one window of length dur (or until ctx ends).
func (m *meter) window(ctx context.Context, dur time.Duration) (*report.Stat, error) {
	a, err := m.snap(false)
	if err != nil {
		return nil, m.s.Explain("read the process", err)
	}
	b, complete, early := m.until(ctx, a, time.Now().Add(dur))
	in := m.input("window", a, b, complete)
	if early {
		in.Notes = append(in.Notes, fmt.Sprintf("ended early by a signal after %.2f s", b.p.Time.Sub(a.p.Time).Seconds()))
	}
	if m.s.Py != nil {
		if names := m.s.ThreadNames(); names != nil {
			m.names = names
			in.Names = names
		}
	}
	return report.Build(in), nil
}

// until polls from a until the deadline, the target's exit, or ctx; it
// returns the final snapshot (full when the target is still there, else
// the last good poll with the counters read at exit).
func (m *meter) until(ctx context.Context, a *snapshot, deadline time.Time) (b *snapshot, complete, early bool) {
	w := procfs.WatchStops(m.s.FS, m.s.Pid, true)
	defer func() { m.stops = w.End() }()
	last := a
	poll := m.opt.Poll
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		if wait > poll {
			wait = poll
		}
		select {
		case <-ctx.Done():
			early = true
		case <-time.After(wait):
		}
		if early || !time.Now().Before(deadline) {
			break
		}
		sn, err := m.lightSnap()
		if err != nil {
			return m.gone(a, last), false, false
		}
		last = sn
	}
	sn, err := m.snap(true)
	if err != nil {
		return m.gone(a, last), false, early
	}
	return sn, true, early
}

// gone completes the last good poll after the target vanished.
func (m *meter) gone(a, last *snapshot) *snapshot {
	b := *last
	if b.cg == nil && m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			b.cg = &c
		}
	}
	b.ps = m.cg.ReadPressure(m.place)
	m.readPerf(&b)
	m.goneAt = time.Now()
	counters := ""
	if m.perf != nil {
		counters = fmt.Sprintf("; the perf counters count up to its exit, over their own window (%.2f s)", m.exitTime().Sub(a.p.Time).Seconds())
	}
	m.notes = append(m.notes, fmt.Sprintf("pid %d exited during the window: the report covers %.2f s, up to the last successful read%s",
		m.s.Pid, b.p.Time.Sub(a.p.Time).Seconds(), counters))
	return &b
}

// watchExit notes when an attached target exits (its pidfd becomes
// readable), to the microsecond: the end of its perf counters' window when
// it exits mid-window, which /proc cannot give (its files are gone by the
// next poll).
func (m *meter) watchExit() {
	pfd, err := unix.PidfdOpen(m.s.Pid, 0)
	if err != nil {
		return // exitTime falls back to when the exit was seen
	}
	m.exitDone = make(chan struct{})
	go func() {
		defer unix.Close(pfd)
		fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
		for {
			select {
			case <-m.exitDone:
				return
			default:
			}
			n, err := unix.Poll(fds, 100)
			if n > 0 {
				m.exitAt.Store(time.Now().UnixNano())
				return
			}
			if err != nil && err != unix.EINTR {
				return
			}
		}
	}()
}

// exitTime is when the target exited: from its pidfd, else when a read
// first failed (an upper bound, at most a poll late).
func (m *meter) exitTime() time.Time {
	if m.exitDone != nil {
		// The pidfd's wake-up may trail the failed read by a moment.
		for end := time.Now().Add(50 * time.Millisecond); m.exitAt.Load() == 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
	if ns := m.exitAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	if !m.goneAt.IsZero() {
		return m.goneAt
	}
	return time.Now()
}

// live emits one report per interval.
func (m *meter) live(ctx context.Context, emit func(*Result) error) error {
	var end time.Time
	if m.opt.Duration > 0 {
		end = time.Now().Add(m.opt.Duration)
	}
	a, err := m.snap(false)
	if err != nil {
		return m.s.Explain("read the process", err)
	}
	for {
		deadline := time.Now().Add(m.opt.Interval)
		if !end.IsZero() && end.Before(deadline) {
			deadline = end
		}
		m.resetPolls()
		b, complete, early := m.until(ctx, a, deadline)
		if err := emit(&Result{Stat: report.Build(m.input("interval", a, b, complete))}); err != nil {
			return err
		}
		if !complete || early || (!end.IsZero() && !time.Now().Before(end)) {
			return nil
		}
		m.notes = nil
		a = b
	}
}

// run measures a spawned command from start to exit.
func (m *meter) run(ctx context.Context) (*Result, error) {
	a := &snapshot{p: &procfs.Sample{Time: m.opt.Started, Pid: m.s.Pid}}
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			a.cg = &c
		}
	}
	a.ps = m.cg.ReadPressure(m.place)
	var last *snapshot
	w := procfs.WatchStops(m.s.FS, m.s.Pid, true)
	tick := time.NewTicker(m.opt.Poll)
	defer tick.Stop()
	tries := 0
loop:
	for {
		select {
		case <-m.s.Exited():
			break loop
		case <-ctx.Done():
			// Ctrl-C: the caller gives the command its chance to finish
			// (and then ends it); its whole run is still reported.
			<-m.s.Exited()
			break loop
		case <-tick.C:
			if sn, err := m.lightSnap(); err == nil {
				last = sn
				if m.s.Py == nil && tries < 10 {
					tries++
					m.s.TryPython()
				}
				if m.s.Py != nil {
					if m.names == nil {
						m.names = map[int]string{}
					}
					if n := m.s.ThreadNames(); n != nil {
						for k, v := range n {
							m.names[k] = v
						}
					}
				}
			}
		}
	}
	end := time.Now()
	m.stops = w.End()
	b := &snapshot{p: &procfs.Sample{Pid: m.s.Pid}}
	if last != nil {
		cp := *last.p
		b.p = &cp
		m.notes = append(m.notes, fmt.Sprintf("per-thread numbers, memory gauges and I/O are as of the last poll, %.0f ms before the exit",
			float64(end.Sub(last.p.Time).Milliseconds())))
	} else {
		m.notes = append(m.notes, "the command exited before the first poll: per-thread numbers are missing")
	}
	b.p.Time = end
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			b.cg = &c
		}
	}
	b.ps = m.cg.ReadPressure(m.place)
	m.readPerf(b)
	in := m.input("run", a, b, true)
	in.Rusage = m.s.Rusage()
	if ru := in.Rusage; ru != nil {
		if r := uint64(ru.Inblock) * 512; r > b.p.IO.ReadBytes {
			b.p.IO.ReadBytes = r
		}
		if w := uint64(ru.Oublock) * 512; w > b.p.IO.WriteBytes {
			b.p.IO.WriteBytes = w
		}
	}
	code := m.s.ExitCode()
	in.ExitCode = &code
	if m.perf != nil {
		in.Notes = append(in.Notes, "perf counters were opened just after the command started: its first instants are not counted")
	}
	st := report.Build(in)
	if st.Comm == "" {
		st.Comm = "?"
	}
	return &Result{Stat: st, ExitCode: code}, nil
}

// Validate checks the options as the command line gave them; durationSet:
// -d was given (with -i and no -d, a live report runs until Ctrl-C).
func (o Options) Validate(durationSet bool) error {
	switch {
	case o.Duration <= 0 && !(o.Interval > 0 && !durationSet):
		return errors.New("stat: -d must be positive")
	case o.Interval < 0:
		return errors.New("stat: -i must be positive")
	case o.Interval > 0 && o.Interval < 10*time.Millisecond:
		return errors.New("stat: -i below 10ms measures the observer, not the target")
	case o.Poll < time.Millisecond:
		return errors.New("stat: --poll must be at least 1ms")
	}
	return nil
}
