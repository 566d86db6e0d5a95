package offcpu

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// Options of a run.
type Options struct {
	Duration time.Duration // 0: until ctx ends or the target exits
	MinBlock time.Duration // waits shorter than this stay in the totals but not in the profile
	Wall     bool          // also fold on-CPU time per thread under [on-CPU]
	Threads  bool          // root each stack at its thread
	Drain    time.Duration // ring drain period (default 1 ms)
	FS       procfs.FS     // the proc filesystem (procfs.Default() when zero)
	// MapEntries, when > 0, sizes every hash map of the eBPF engine (tests
	// of the bounds); 0 keeps the object's sizes.
	MapEntries uint32
	// NoKernelWalk: the eBPF engine reads Python stacks from user space,
	// as when the kernel walk is unavailable (tests and benchmarks).
	NoKernelWalk bool
	// Waker (eBPF engine only): join each blocked wait to the thread that
	// woke it, folded as [woken by] frames and the waker's kernel stack.
	Waker bool
	// Engine is EngineAuto ("" too: eBPF, else perf, saying why),
	// EngineBPF (no fallback; Waker implies it) or EnginePerf.
	Engine string
	// Exclude leaves out of the profile every stack with a frame whose
	// label matches one of these (Result.Excluded says how much).
	Exclude []*regexp.Regexp
	// Greenlets (perf engine only): root each wait at the greenlet that
	// ran and its parents, and give a gevent hub's waits in its event loop
	// to the greenlets parked during them (greenlet.go).
	Greenlets bool
	// OnFallback, when set, is told the fallback line (Result.Fallback)
	// at the moment auto gives up on eBPF, before the perf engine runs.
	OnFallback func(line string)
	// SetAsked: the command line asked for a set (several -p, --children
	// given, --cgroup, --all): the processes account is kept even when one
	// process was seen. The bpf engine observes the session's set
	// (s.Set.Many()); the perf engine observes the target alone.
	SetAsked bool
}

// WokenBy prefixes the frame that names a wait's waker (--waker).
const WokenBy = "[woken by] "

// Engine names.
const (
	EngineAuto = "auto"
	EnginePerf = "perf"
	EngineBPF  = "bpf"
)

// ThreadStat is one thread's account of the window.
type ThreadStat struct {
	Tid      int                `json:"tid"`
	Pid      int                `json:"pid,omitempty"` // its process, in a set
	Name     string             `json:"name,omitempty"`
	WindowS  float64            `json:"window_s"` // the part of the window the thread was watched
	OnCPUS   float64            `json:"on_cpu_s"`
	OffCPUS  float64            `json:"off_cpu_s"` // blocked (not runnable)
	RunQS    float64            `json:"runqueue_s"`
	ShortN   uint64             `json:"short_waits"`   // waits that ended before anyone looked
	ShortS   float64            `json:"short_waits_s"` // their total (included in off_cpu_s / runqueue_s)
	ClassS   map[string]float64 `json:"classes_s"`
	Switches uint64             `json:"switches"` // its switch-outs: one per context switch
	Exited   bool               `json:"exited,omitempty"`
}

// Result is a run's profile (microseconds) and its account.
type Result struct {
	Profile      *flame.Profile     `json:"-"`
	WindowS      float64            `json:"window_s"`
	Threads      []ThreadStat       `json:"threads"`
	ClassS       map[string]float64 `json:"classes_s"`
	Switches     uint64             `json:"switches"` // the target's switch-outs: one per context switch
	Lost         uint64             `json:"lost"`
	Looks        uint64             `json:"stack_reads"`
	LookRetries  uint64             `json:"reads_discarded"` // reads thrown away: the thread ran (or was woken) during the read
	ShortN       uint64             `json:"short_waits"`
	ShortS       float64            `json:"short_waits_s"`
	ShortLongN   uint64             `json:"unread_long_waits"` // waits ≥ 2 drain periods nobody read (drain late, read failed)
	FilteredN    uint64             `json:"filtered_waits"`    // below --min-block: in the totals, not in the profile
	FilteredS    float64            `json:"filtered_s"`
	ObserverCPUS float64            `json:"observer_cpu_s"`
	DrainMS      float64            `json:"drain_period_ms"`
	Engine       string             `json:"engine"`        // bpf or perf
	BPF          *BPFStats          `json:"bpf,omitempty"` // the eBPF engine's own account
	Excluded     *Excluded          `json:"excluded,omitempty"`
	Greenlets    *GreenletStats     `json:"greenlets,omitempty"` // --greenlets
	// A set of processes (SetAsked, or more than one process seen): each
	// member and the counts.
	Processes     []ProcessAccount `json:"processes,omitempty"`
	ProcessCounts *SetCounts       `json:"process_counts,omitempty"`
	// Execed (-p PID): the target exec'd this program and the window
	// ended at its exec.
	Execed string `json:"target_execed,omitempty"`
	// Fallback is why auto runs the perf engine: "eBPF engine unavailable
	// (REASON; GATE): using the perf engine"; "" when it was not tried or
	// loaded.
	Fallback string `json:"-"`
}

// Excluded is what --exclude took out of the profile (not out of the
// per-thread and class totals).
type Excluded struct {
	Patterns []string `json:"patterns"`
	US       int64    `json:"us"`
	Stacks   int      `json:"stacks"`
}

type thr struct {
	tid      int
	on       bool
	since    int64
	first    int64
	end      int64
	preempt  bool
	seen     bool
	ids      []int // stack (root first, thread root included) of the current wait
	class    string
	onNS     int64
	offNS    int64
	rqNS     int64
	shortN   uint64
	shortNS  int64
	shortQNS int64 // short waits that were preemptions
	classNS  map[string]int64
	switches uint64
	gone     bool
}

type engine struct {
	s        *session.Session
	opt      Options
	tr       *perfevent.SwitchTracer
	tids     *session.TidMap
	prof     *flame.Profile
	threads  map[int]*thr
	order    []int
	frameIDs map[[2]uint64]int
	gilLo    uint64
	gilHi    uint64
	res      Result
	minNS    int64
	drainNS  int64
	scratch  []int
	namer    *session.ThreadNamer // the target's thread names, learned while it lives (alive.go)
	// memberOf: a set's other process that thread tid belongs to (0: the
	// target's, or no set) and its interpreter (nil: not read); memberNames:
	// their namers.
	memberOf    func(tid int) (int, *pyframes.Process)
	memberNames *session.MemberNames
	roots       *flame.ThreadRoots // --threads: each thread's root frame
	learnAt     time.Time          // the last maps refresh (alive_bpf.go)
	green       *greenOff          // --greenlets
}

// runPerf is the perf engine: it watches the target's context switches
// until opt.Duration passes, ctx ends or the target exits; a cut-short run
// still returns its result.
func runPerf(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	e := newEngine(s, opt, EnginePerf)
	e.tr = perfevent.NewSwitchTracer()
	defer e.tr.Close()
	opt = e.opt
	e.gilLo, e.gilHi = s.Py.GILRange()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := clock.ObserverCPU()
	if opt.Greenlets {
		e.greenStart()
	}
	start := clock.MonoNow()
	if err := e.addThreads(); err != nil {
		return nil, err
	}
	var deadline <-chan time.Time
	if opt.Duration > 0 {
		t := time.NewTimer(opt.Duration)
		defer t.Stop()
		deadline = t.C
	}
	lastScan, lastCheck := time.Now(), time.Now()
	var err error
	for !ended(ctx, deadline, s) {
		nap(opt.Drain)
		if err = e.drain(); err != nil {
			break
		}
		e.look()
		e.greenTick()
		e.lookNames()
		if time.Since(lastScan) > 50*time.Millisecond {
			lastScan = time.Now()
			if err = e.addThreads(); err != nil {
				break
			}
		}
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			if !s.Alive() {
				break
			}
		}
	}
	if e.green != nil && s.Alive() {
		e.green.scan(e) // the waits still open have it inside
	}
	if derr := e.drain(); err == nil {
		err = derr
	}
	e.lookNames() // the last names, if the target still runs
	end := clock.MonoNow()
	e.finish(end)
	e.greenEnd()
	e.res.WindowS = float64(end-start) / 1e9
	e.res.ObserverCPUS = (clock.ObserverCPU() - cpu0).Seconds()
	m := &e.prof.Meta
	m.DurationS = e.res.WindowS
	m.Samples = e.res.Switches
	m.Lost = e.res.Lost
	m.StackReads = e.res.Looks
	m.ObserverCPUS = e.res.ObserverCPUS
	e.res.Profile = e.prof
	if err == nil {
		err = e.execed()
	}
	return &e.res, err
}

// execed is the target's exec (session.ExecedError) when it exec'd during
// the window, noted in the result; nil otherwise.
func (e *engine) execed() error {
	err := e.s.Execed()
	var xe *session.ExecedError
	if errors.As(err, &xe) {
		e.res.Execed = xe.Now()
	}
	return err
}

func (e *engine) addThreads() error {
	tids, err := e.s.FS.Tasks(e.s.Pid)
	if err != nil {
		return nil // exiting: the loop notices
	}
	live := make(map[int]bool, len(tids))
	for _, tid := range tids {
		live[tid] = true
		if e.tr.Watching(tid) {
			continue
		}
		if th := e.threads[tid]; th != nil && th.gone {
			continue
		}
		t0 := clock.MonoNow() // before the event exists: every record is later
		if err := e.tr.AddThread(tid); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			return perfError(e.s.Pid, err)
		}
		w := readWait(e.opt.FS, e.s.Pid, tid)
		th := &thr{tid: tid, on: w.State == "R" || w.State == "", since: t0, first: t0, classNS: map[string]int64{}}
		e.threads[tid] = th
		e.order = append(e.order, tid)
	}
	for _, tid := range e.tr.Tids() {
		if !live[tid] {
			_ = e.tr.Drain(tid, e.handle)
			e.tr.Remove(tid)
			if th := e.threads[tid]; th != nil {
				th.gone = true
				th.end = th.since // its last record: what followed was its exit
			}
		}
	}
	return nil
}

func (e *engine) drain() error { return e.tr.DrainAll(e.handle) }

func (e *engine) handle(tid int, rec perfevent.RawRecord) {
	switch rec.Type {
	case perfevent.RecordLost:
		if n, err := perfevent.DecodeLost(rec.Body); err == nil {
			e.res.Lost += n
		}
	case perfevent.RecordSwitch:
		id, out, preempt, err := perfevent.DecodeSwitch(rec)
		if err != nil {
			return
		}
		th := e.threads[tid]
		if th == nil {
			return
		}
		t := int64(id.Time)
		d := max(t-th.since, 0)
		if out {
			// One switch, counted at its switch-out (its switch-in is
			// the same switch's end, not another one).
			th.switches++
			e.res.Switches++
			// Whatever we believed, it was running until now.
			th.onNS += d
			th.on, th.since, th.preempt, th.seen = false, t, preempt, false
			return
		}
		if !th.on {
			e.foldOff(th, d)
		} else {
			// A switch-in while we thought it ran (its switch-out predates
			// the event): blocked since we started watching, unread.
			e.foldShort(th, d)
		}
		th.on, th.since, th.seen = true, t, false
	}
}

// foldOff closes the current wait of th, d ns long.
func (e *engine) foldOff(th *thr, d int64) {
	if !th.seen {
		e.foldShort(th, d)
		return
	}
	if th.class == ClassRunQueue {
		th.rqNS += d
	} else {
		th.offNS += d
	}
	th.classNS[th.class] += d
	if d < e.minNS {
		e.res.FilteredN++
		e.res.FilteredS += float64(d) / 1e9
		return
	}
	if e.green != nil && e.green.hubWait(th, d) {
		return
	}
	ids := append(e.scratch[:0], th.ids...)
	ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[" + th.class + "]"}))
	e.prof.AddIDs(ids, d/1000)
	e.scratch = ids
}

// foldShort accounts a wait nobody looked at; its weight is folded once per
// thread at the end (exact ns sums).
func (e *engine) foldShort(th *thr, d int64) {
	th.shortN++
	if th.preempt {
		th.rqNS += d
		th.shortQNS += d
		th.classNS[ClassRunQueue] += d
	} else {
		th.offNS += d
		th.shortNS += d
	}
	if d >= 2*e.drainNS+2e6 {
		e.res.ShortLongN++
	}
}

// look reads the stack and wait reason of every thread that is off CPU and
// not yet read: it cannot run while we read (kept only if its ring stayed
// quiet, i.e. it did not switch in meanwhile).
func (e *engine) look() {
	for _, tid := range e.order {
		th := e.threads[tid]
		if th.gone || th.on || th.seen {
			continue
		}
		e.res.Looks++
		class := ClassRunQueue
		if !th.preempt {
			w := readWait(e.opt.FS, e.s.Pid, tid)
			if w.Woken {
				// Woken before the read (on a busy machine it may wait
				// for a CPU long before its switch-in is written): the
				// wait's cause is gone. Unread unless a later look still
				// finds it blocked.
				e.res.LookRetries++
				continue
			}
			class = Classify(w, e.gilLo, e.gilHi)
		}
		ids := e.stack(tid, th.ids[:0])
		if !e.tr.Quiet(tid) {
			e.res.LookRetries++
			th.ids = ids
			continue
		}
		th.ids, th.class, th.seen = ids, class, true
	}
}

// stack appends tid's root-first Python stack (or a marker) to ids.
func (e *engine) stack(tid int, ids []int) []int {
	if e.opt.Threads {
		ids = append(ids, e.threadFrame(tid))
	}
	if e.green != nil {
		return e.green.stack(e, tid, ids)
	}
	ref, ok := e.tids.Lookup(tid)
	if !ok {
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python thread state]"}))
	}
	return e.readStack(ids, e.s.Py, ref.Addr, e.frameIDs)
}

// readStack appends the root-first Python stack of thread state ts, read
// through py (its process's reader, frameIDs its frame cache), or the
// marker of why there is none.
func (e *engine) readStack(ids []int, py *pyframes.Process, ts uint64, frameIDs map[[2]uint64]int) []int {
	frames, consistent, snapshot, err := py.Stack(ts, pyframes.Options{Retries: 1, Snapshot: true, Reuse: true})
	switch {
	case err != nil && !errors.Is(err, pyframes.ErrTorn):
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[unreadable]"}))
	case !consistent && !snapshot:
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[torn read]"}))
	case len(frames) == 0:
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python frames]"}))
	}
	return e.pythonIDsIn(ids, frames, frameIDs)
}

// pythonIDs appends frames (innermost first) to ids root first, each an
// interned profile frame, cached by code object and line.
func (e *engine) pythonIDs(ids []int, frames []pyframes.Frame) []int {
	return e.pythonIDsIn(ids, frames, e.frameIDs)
}

// pythonIDsIn is pythonIDs with a process's own frame cache (code
// objects are addresses in that process).
func (e *engine) pythonIDsIn(ids []int, frames []pyframes.Frame, frameIDs map[[2]uint64]int) []int {
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		k := [2]uint64{f.CodeID, uint64(f.Line)}
		id, ok := frameIDs[k]
		if !ok {
			id = e.prof.Intern(flame.Frame{Kind: flame.Python, Function: f.Function, File: f.File, Line: f.Line})
			frameIDs[k] = id
		}
		ids = append(ids, id)
	}
	return ids
}

// threadFrame is tid's root frame (--threads): one per thread, named
// when its name is learned, whenever that is.
func (e *engine) threadFrame(tid int) int {
	if pid, gen, name := e.memberThread(tid); pid != 0 {
		// Another process of a set: named through its own interpreter.
		return e.roots.ID(flame.ThreadKey{Pid: pid, Tid: tid, Gen: gen}, name)
	}
	k := session.ThreadGen{Tid: tid, Gen: e.namer.Gen(tid)}
	return e.roots.ID(flame.ThreadKey{Tid: tid, Gen: k.Gen}, e.namer.Name(k))
}

// memberThread is the process of thread tid when it is another one of a
// set (0: the target's, or no set), with the thread's generation and name
// there (0 and "": its interpreter not read).
func (e *engine) memberThread(tid int) (pid, gen int, name string) {
	if e.memberOf == nil {
		return 0, 0, ""
	}
	pid, py := e.memberOf(tid)
	if pid == 0 {
		return 0, 0, ""
	}
	gen, name = e.memberNames.Thread(pid, tid, py)
	return pid, gen, name
}

// finish closes every open interval at end and folds the per-thread sums.
func (e *engine) finish(end int64) {
	e.res.ClassS = map[string]float64{}
	state := func(s string) int { return e.prof.Intern(flame.Frame{Kind: flame.State, Function: s}) }
	for _, tid := range e.order {
		th := e.threads[tid]
		if !th.gone {
			d := max(end-th.since, 0)
			if th.on {
				th.onNS += d
			} else {
				e.foldOff(th, d)
			}
			th.end = end
		}
		root := func() []int {
			if e.opt.Threads {
				return []int{e.threadFrame(tid)}
			}
			return nil
		}
		if th.shortNS > 0 {
			e.prof.AddIDs(append(root(), state("[short waits: not read]")), th.shortNS/1000)
		}
		if th.shortQNS > 0 {
			e.prof.AddIDs(append(root(), state("[short waits: not read]"), state("["+ClassRunQueue+"]")), th.shortQNS/1000)
		}
		if e.opt.Wall && th.onNS > 0 {
			e.prof.AddIDs(append(root(), state("[on-CPU]")), th.onNS/1000)
		}
		st := ThreadStat{Tid: tid, Name: e.name(tid), WindowS: float64(th.end-th.first) / 1e9,
			OnCPUS: float64(th.onNS) / 1e9, OffCPUS: float64(th.offNS) / 1e9, RunQS: float64(th.rqNS) / 1e9,
			ShortN: th.shortN, ShortS: float64(th.shortNS+th.shortQNS) / 1e9, ClassS: map[string]float64{},
			Switches: th.switches, Exited: th.gone}
		for c, ns := range th.classNS {
			st.ClassS[c] = float64(ns) / 1e9
			e.res.ClassS[c] += float64(ns) / 1e9
		}
		e.res.ShortN += th.shortN
		e.res.ShortS += st.ShortS
		e.res.Threads = append(e.res.Threads, st)
	}
	sort.Slice(e.res.Threads, func(i, j int) bool { return e.res.Threads[i].Tid < e.res.Threads[j].Tid })
}

func perfError(pid int, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return &capability.GateError{
			Op:   fmt.Sprintf("open context-switch events on pid %d", pid),
			Gate: fmt.Sprintf("kernel.perf_event_paranoid=%d without CAP_PERFMON", capability.PerfEventParanoid()),
			Fix:  "run as root, grant CAP_PERFMON (setcap cap_perfmon+ep on pyobs), or lower it: sysctl kernel.perf_event_paranoid=1",
			Err:  errors.Join(capability.ErrPermission, err),
		}
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// ended reports whether the window is over: Ctrl-C, the duration, or a
// spawned target's exit.
func ended(ctx context.Context, deadline <-chan time.Time, s *session.Session) bool {
	select {
	case <-ctx.Done():
		return true
	case <-deadline:
		return true
	default:
	}
	if s.Spawned() {
		select {
		case <-s.Exited():
			return true
		default:
		}
	}
	return s.ExecedWithin(5*time.Millisecond) != nil // -p PID exec'd: another program from there
}

// nap sleeps one drain period in a plain nanosleep on this locked thread:
// no Go timer, no hand-off to another thread.
func nap(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = unix.Nanosleep(&ts, nil)
}

// newEngine is the state both engines share, with opt's defaults filled in.
func newEngine(s *session.Session, opt Options, engineName string) *engine {
	if opt.Drain <= 0 {
		opt.Drain = time.Millisecond
	}
	if opt.FS == (procfs.FS{}) {
		opt.FS = procfs.Default()
	}
	mode := "offcpu"
	if opt.Wall {
		mode = "wall"
	}
	e := &engine{s: s, opt: opt, tids: s.NewTidMap(), threads: map[int]*thr{},
		frameIDs: map[[2]uint64]int{}, minNS: opt.MinBlock.Nanoseconds(), drainNS: opt.Drain.Nanoseconds()}
	e.prof = flame.New(flame.Meta{Command: "offcpu", Mode: mode, Unit: "microseconds", Pid: s.Pid, Python: s.Py.Version().String()})
	e.namer, e.roots = s.NewThreadNamer(opt.Threads), flame.NewThreadRoots(e.prof)
	e.res.DrainMS = float64(opt.Drain.Microseconds()) / 1e3
	e.res.Engine = engineName
	e.tids.Refresh()
	return e
}
