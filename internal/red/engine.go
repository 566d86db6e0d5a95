package red

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// batchWait is how long the reader sleeps when the ring is empty.
const batchWait = 5 * time.Millisecond

// staleGrace is how long a connection displaced from its fd number by an
// accept waits at a window's end for its close to be read (the close's
// thread may not have run since it freed the number); older, the close
// was missed.
const staleGrace = time.Second

// Options of a measurement.
type Options struct {
	Slowest int           // keep the N slowest requests (with stacks)
	Poll    time.Duration // in-flight requests older than this get a stack read, every Poll
	// Duration, when > 0, ends the measurement that long after the probe
	// is attached; 0: when ctx ends or the target exits.
	Duration time.Duration
	// Interval is Stream's report period.
	Interval time.Duration
	// SampleHz is the kernel sampler's rate per CPU (0: no kernel
	// sampling, stacks from user-space reads only).
	SampleHz int
	// Profile builds the final report's flame graph (route as the root).
	Profile bool
}

// Run measures the target until opt.Duration passes, ctx ends or the
// target exits, and returns the whole window's report. It does not end a
// spawned target.
func Run(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	var res *Result
	err := measure(ctx, s, opt, 0, func(r *Result) error { res = r; return nil })
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Stream is Run in live mode: one report per opt.Interval to emit, and the
// last at the end (emit's error ends it and is returned).
func Stream(ctx context.Context, s *session.Session, opt Options, emit func(*Result) error) error {
	return measure(ctx, s, opt, opt.Interval, emit)
}

func measure(ctx context.Context, s *session.Session, opt Options, interval time.Duration, emit func(*Result) error) error {
	e, err := open(s, opt)
	if err != nil {
		return err
	}
	defer e.close()
	var end time.Time
	if opt.Duration > 0 {
		end = time.Now().Add(opt.Duration)
	}
	return e.run(ctx, end, interval, emit)
}

// engine is one attached measurement.
type engine struct {
	s       *session.Session
	opt     Options
	probe   *probe
	tr      *Tracker
	socks   *setSockets
	many    bool        // a set of processes (workers and all), not one
	exits   map[int]int // exited members: 1 seen, -1 handled
	tids    *session.TidMap
	ev      Event
	decode  uint64
	reads   uint64 // stack reads
	failed  uint64 // stack reads that failed or were torn
	cpu0    time.Duration
	started int64
	exited  string
	notes   []string
	ks      *ksampler // nil: no kernel sampling (ksWhy says why)
	ksWhy   string
}

// open attaches the probe to the session's target (and its set: the
// workers of a prefork server) and scans their sockets.
func open(s *session.Session, opt Options) (*engine, error) {
	if opt.Poll <= 0 {
		opt.Poll = 50 * time.Millisecond
	}
	e := &engine{s: s, opt: opt, cpu0: clock.ObserverCPU(), socks: newSetSockets(), many: s.Set.Many(), exits: map[int]int{}}
	if s.Py != nil {
		e.tids = s.NewTidMap()
	}
	so := s.Options()
	p, err := loadProbe(so)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	e.probe = p
	// The sampler before the syscall probe is on (its load is the slow
	// part): once it is, requests are seen with their stacks.
	e.startSampler()
	if err := p.seed(so, e.many); err != nil {
		p.Close()
		e.closeSampler()
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	// The members' sockets before the syscall programs are on: once they
	// are, what the processes do is seen, and the sockets it uses were
	// found while the processes were there (their events may be read
	// after they exited). A socket opened in between is resolved at its
	// first use.
	e.tr = NewTracker(e.socks.Resolve, opt.Slowest)
	pids := []int{s.Pid}
	if p.set != nil {
		pids = p.set.Pids()
		e.tr.Parent = e.parent
	}
	e.started = clock.MonoNow()
	nconns := 0
	for _, pid := range pids {
		listeners, conns, err := e.socks.of(pid).Scan()
		if err != nil {
			if pid != s.Pid {
				continue // a member that exited meanwhile
			}
			p.Close()
			e.closeSampler()
			return nil, s.Explain("scan sockets", err)
		}
		for fd, port := range listeners {
			e.tr.AddListener(FD{int32(pid), fd}, port)
		}
		for fd, port := range conns {
			e.tr.AddConn(FD{int32(pid), fd}, port, uint64(e.started))
		}
		nconns += len(conns)
	}
	if err := p.attach(); err != nil {
		p.Close()
		e.closeSampler()
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	// A command held before its exec runs now: everything it does is seen.
	if err := s.Release(); err != nil {
		p.Close()
		e.closeSampler()
		return nil, err
	}
	e.started = clock.MonoNow()
	if nconns > 0 {
		e.notes = append(e.notes, fmt.Sprintf("%d connection(s) were open at the start: their queue time is unknown and a request already in progress on them is not counted", nconns))
	}
	if e.ks != nil {
		e.tr.Join = e.ks.join
	}
	return e, nil
}

// parent is the process pid was forked from, as the set's account has it
// (its join event), else as /proc does (0: unknown).
func (e *engine) parent(pid int32) int32 {
	if m, ok := e.probe.set.Member(int(pid)); ok && m.Parent != 0 {
		return int32(m.Parent)
	}
	if pp, err := e.s.FS.Ppid(int(pid)); err == nil {
		return int32(pp)
	}
	return 0
}

// membersLeft says whether a member of the set besides the target has not
// exited (an attached target's workers outlive it: the window goes on
// while they serve).
func (e *engine) membersLeft() bool {
	if e.probe.set == nil {
		return false
	}
	for _, m := range e.probe.set.Members() {
		if m.Pid != e.s.Pid && !m.Exited {
			return true
		}
	}
	return false
}

// procLabel is a process frame: "[pid N] argv…".
func (e *engine) procLabel(pid int) string {
	var argv []string
	if e.probe.set != nil {
		if m, ok := e.probe.set.Member(pid); ok {
			argv = m.Argv
		}
	}
	return fmt.Sprintf("[pid %d] %s", pid, ShortArgv(argv, 60))
}

// startSampler starts the kernel sampler once the target's runtime is
// known (a spawned target's only after it started Python).
func (e *engine) startSampler() {
	if e.ks != nil || (e.opt.Slowest <= 0 && !e.opt.Profile) {
		return
	}
	e.ks, e.ksWhy = openSampler(e.s, e.tids, e.opt, e.probe, e.s.Options())
	if e.ks != nil && e.many {
		e.ks.proc = e.procLabel
	}
	if e.ks != nil && e.tr != nil {
		e.tr.Join = e.ks.join
	}
}

func (e *engine) closeSampler() {
	if e.ks != nil {
		e.ks.close()
		e.ks = nil
	}
}

// close detaches everything.
func (e *engine) close() {
	e.probe.Close()
	e.closeSampler()
}

// handle passes one event to the tracker, once every kernel sample taken
// before it has been read (a request's end joins its thread's samples).
func (e *engine) handle(ev *Event) {
	if e.ks != nil && ev.TExit >= e.ks.drainedAt {
		e.ks.drain()
	}
	e.tr.Handle(ev)
}

// run reads events until end (zero: until ctx ends or the target exits);
// with interval > 0 it emits one report per interval, else one at the end.
func (e *engine) run(ctx context.Context, end time.Time, interval time.Duration, emit func(*Result) error) error {
	winStart := e.started
	nextPoll := time.Now().Add(e.opt.Poll)
	var nextEmit time.Time
	if interval > 0 {
		nextEmit = time.Now().Add(interval)
	}
	alive := time.Now()
	for {
		deadline := nextPoll
		if !end.IsZero() && end.Before(deadline) {
			deadline = end
		}
		var ok bool
		var err error
		if e.probe.pending() == 0 {
			// Sleep rather than wait in epoll for each event: events carry
			// their kernel times, so batching costs no accuracy and saves a
			// wakeup per syscall of the target.
			if d := min(time.Until(deadline), batchWait); d > 0 {
				time.Sleep(d)
			}
		} else {
			ok, err = e.probe.read(time.Now(), &e.ev)
		}
		if err != nil {
			e.decode++
			if !errors.Is(err, errDecode) {
				return err
			}
		}
		if ok {
			e.handle(&e.ev)
			if e.tr.Events&255 != 0 { // look at the clock every 256 events
				continue
			}
		}
		if e.ks != nil {
			e.ks.drain()
		}
		now := time.Now()
		stop := false
		select {
		case <-ctx.Done():
			stop = true
			e.notes = append(e.notes, fmt.Sprintf("ended early by a signal after %.2f s", float64(clock.MonoNow()-e.started)/1e9))
		case <-e.s.Exited():
			stop = true
		default:
		}
		if !end.IsZero() && !now.Before(end) {
			stop = true
		}
		if !stop && now.Sub(alive) > 200*time.Millisecond {
			alive = now
			if !e.s.Spawned() && !e.s.Alive() && !e.membersLeft() {
				stop = true
			}
		}
		if stop {
			switch {
			case e.many && !e.s.Spawned() && !e.s.Alive() && !e.membersLeft():
				e.exited = fmt.Sprintf("pid %d and the other processes of its set exited (the last after %.2f s): the report covers up to then", e.s.Pid, float64(clock.MonoNow()-e.started)/1e9)
			case !e.s.Alive() || e.isExited():
				e.exited = fmt.Sprintf("pid %d exited after %.2f s: the report covers up to its exit", e.s.Pid, float64(clock.MonoNow()-e.started)/1e9)
			}
			return e.finish(winStart, interval > 0, emit)
		}
		if !now.Before(nextPoll) {
			if e.tids == nil && e.s.Spawned() && e.s.TryPython() {
				e.tids = e.s.NewTidMap()
				e.ksWhy = ""
				e.startSampler()
			}
			e.sampleStacks()
			e.reapExited(false)
			nextPoll = now.Add(e.opt.Poll)
		}
		if interval > 0 && !now.Before(nextEmit) {
			t := clock.MonoNow()
			if e.ks != nil {
				e.ks.drain()
			}
			e.tr.CloseStale(uint64(t) - uint64(staleGrace))
			e.tr.FlushResponded(uint64(t))
			if err := emit(e.report(winStart, t, false)); err != nil {
				return err
			}
			e.tr.ResetSlowest()
			winStart = t
			nextEmit = nextEmit.Add(interval)
		}
	}
}

func (e *engine) isExited() bool {
	select {
	case <-e.s.Exited():
		return true
	default:
		return false
	}
}

// finish detaches the probe, drains what the ring still holds, and emits
// the last report: the window's, or with intervals (live) the last
// interval's, partial, never labelled the whole run's.
func (e *engine) finish(winStart int64, live bool, emit func(*Result) error) error {
	t := clock.MonoNow()
	e.probe.detach()
	for e.probe.pending() > 0 {
		ok, err := e.probe.read(time.Now().Add(10*time.Millisecond), &e.ev)
		if err != nil && !errors.Is(err, errDecode) {
			break
		}
		if !ok {
			break
		}
		if err == nil {
			e.handle(&e.ev)
		}
	}
	if e.ks != nil {
		e.ks.stop()
	}
	e.reapExited(true)
	e.tr.CloseStale(math.MaxUint64)
	e.tr.FlushResponded(uint64(t))
	return emit(e.report(winStart, t, !live))
}

// reapExited ends the connections that exited members left open (their
// exit closed them without a close call): once the event ring was empty
// after the exit was seen (the process's last events, sent before its
// exit, are read from another ring: they come first); all now.
func (e *engine) reapExited(now bool) {
	if e.probe.set == nil {
		return
	}
	drained := e.probe.pending() == 0
	for _, m := range e.probe.set.Members() {
		if !m.Exited || e.exits[m.Pid] < 0 {
			continue
		}
		if e.exits[m.Pid] == 0 {
			e.exits[m.Pid] = 1 // seen: its events are in the ring by now
			if !now {
				continue
			}
		}
		if !drained && !now {
			continue
		}
		e.exits[m.Pid] = -1
		e.tr.ProcessExited(m.Pid, uint64(clock.MonoNow()))
		e.socks.forget(m.Pid)
	}
}

// sampleStacks reads the handling thread's Python stack of every request
// in flight longer than a poll period.
func (e *engine) sampleStacks() {
	if e.tids == nil || e.opt.Slowest <= 0 {
		return
	}
	now := uint64(clock.MonoNow())
	for _, f := range e.tr.InFlight() {
		if now-min(f.Start, now) < uint64(e.opt.Poll) || f.Pid != e.s.Pid {
			continue // the frame walker reads the target (another member: kernel samples only)
		}
		ref, ok := e.tids.Lookup(int(f.Tid))
		if !ok {
			e.failed++
			e.tr.AddStack(f, "", nil)
			continue
		}
		e.reads++
		frames, consistent, _, err := e.s.Py.Stack(ref.Addr, pyframes.Options{Retries: 2})
		if err != nil || !consistent {
			e.failed++
			e.tr.AddStack(f, "", nil)
			continue
		}
		sf := make([]StackFrame, len(frames))
		var key strings.Builder
		for i, fr := range frames {
			sf[i] = StackFrame{Function: fr.Function, File: fr.File, Line: fr.Line}
			key.WriteString(fr.Function)
			key.WriteByte(0)
			key.WriteString(fr.File)
			key.WriteByte(0)
			key.WriteString(strconv.Itoa(fr.Line))
			key.WriteByte(1)
		}
		e.tr.AddStack(f, key.String(), sf)
	}
}

// Validate checks the options as the command line gave them (Duration is
// -d's value, before a live or spawned run sets it aside).
func (o Options) Validate() error {
	switch {
	case o.Duration <= 0:
		return errors.New("red: -d must be positive")
	case o.Interval < 0:
		return errors.New("red: -i must be positive")
	case o.Interval > 0 && o.Interval < 100*time.Millisecond:
		return errors.New("red: -i below 100ms is mostly noise")
	case o.Poll < 5*time.Millisecond:
		return errors.New("red: --poll must be at least 5ms")
	case o.Slowest < 0 || o.Slowest > 1000:
		return errors.New("red: --slowest must be between 0 and 1000")
	case o.SampleHz < 0 || o.SampleHz > 10000:
		return errors.New("red: --sample-hz must be between 0 and 10000")
	case o.Profile && o.Interval > 0:
		return errors.New("red: --profile writes one profile for the whole run: not with -i")
	case o.Profile && o.SampleHz == 0:
		return errors.New("red: --profile needs the kernel's samples: --sample-hz must be positive")
	}
	return nil
}
