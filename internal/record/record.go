package record

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/fallback"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/unwind"
)

// markerTruncated roots a stack deeper than the user-space walker goes:
// the kernel walker's marker for the same (kwalk.MarkerTruncated, amd64).
const markerTruncated = "[truncated stack]"

// Options of a recording.
type Options struct {
	Mode     string        // cpu (default), wall, gil
	Freq     int           // Hz
	Duration time.Duration // 0: until the target exits or ctx ends
	Threads  bool          // root each stack at its thread
	// Native and Kernel add each sample's native frames (unwound from a
	// copy of its user stack, StackSize bytes) and kernel frames (cpu mode).
	Native, Kernel bool
	StackSize      int
	// Async roots samples of a thread running an asyncio task at the task
	// and its awaiters (3.14+; see async.go); AsyncStats receives its account.
	Async      bool
	AsyncStats *AsyncStats
	Progress   func(Progress)
	// Engine (cpu mode without --native/--kernel/--async): auto (default;
	// bpf, else perf), bpf or perf; see engine.go. OnFallback receives the
	// one line saying why auto did not use bpf.
	Engine     string
	OnFallback func(string)
	// Stream: see stream.go.
	Stream func(*flame.Profile, Progress)
	// End, when set, receives the recording's last numbers once, as it
	// ends: Elapsed its whole length, TargetCPU the target's CPU to its
	// end (a spawned program's exit account once it is gone).
	End func(Progress)
	// Look is how often the bpf engine reads its ring and counts and
	// refreshes its thread map (default 200 ms, up to 1 s above 4 kHz: lookFor; Progress and Stream come
	// as often). A slow sampler (the agent's 19 Hz) needs fewer looks.
	Look time.Duration

	// Greenlets roots samples at the running greenlet and its parents
	// (greenlets.go); GreenletStats receives its account.
	Greenlets     bool
	GreenletStats *GreenletStats

	// SetRequired: the caller asked for a set (several -p, --children,
	// --cgroup, --all), not just -- CMD with its children by default; a
	// set needs the bpf engine, and without it Run refuses. SetAccount
	// receives the set's account when the recording saw more than one
	// process or SetRequired.
	SetRequired bool
	SetAccount  *SetAccount
}

// Progress is the live status line's content.
type Progress struct {
	Elapsed     time.Duration
	Samples     uint64
	AchievedHz  float64
	Lost, Torn  uint64
	Late        uint64
	ObserverCPU time.Duration
	// TargetCPU: the target's CPU seconds (user + system) since the
	// recording began, read with Elapsed (see Recorder.targetCPU).
	TargetCPU float64
	// StoppedS: how long the target was seen stopped by a signal or a
	// tracer since the recording began (procfs.StopWatch, to its last look).
	StoppedS float64
}

// Recorder holds a recording's state.
type Recorder struct {
	// targetEnded: the loop ended because the target exited (not -d).
	targetEnded bool
	s           *session.Session
	opt         Options
	prof        *flame.Profile
	tids        *session.TidMap
	namer       *session.ThreadNamer // --threads: the target's thread names, learned while it lives
	// A set's other processes (--threads): each one's thread names, by
	// pid, read through its own interpreter (memberPy: nil until it is
	// read, or never for a refused one).
	members  *session.MemberNames
	memberPy func(pid int) *pyframes.Process
	roots    *flame.ThreadRoots // and each thread's one root frame, relabelled as they are learned
	ids      []int              // scratch for one stack's frame ids
	kern     []int              // bpf engine, --kernel: the sample's kernel frames, root first, appended to its stack
	frameIDs map[[2]uint64]int  // (code object, line) -> interned frame
	start    time.Time
	cpu0     time.Duration // observer CPU at the recording's start
	setupCPU time.Duration // observer CPU before it (the walker's load)
	tcpu0    float64
	stops    *procfs.StopWatch // the target's stops by someone else
	samples  uint64
	torn     uint64
	failed   uint64
	lost     uint64
	throt    uint64
	late     uint64
	moved    uint64 // stacks taken from one read while the thread moved on
	reads    uint64 // stack reads (one per thread per drain of the rings)
	pending  map[int]pendingSamples
	nat      *native       // with --native/--kernel
	natCur   *nativeSample // bpf engine, --native: the sample being folded (its pcs in nat.slab)
	natLinks []uint64      // and its Python runs' C-stack links, innermost first
	lastCPU  float64       // the achieved rate's window: the last reading of the target's CPU seconds
	progCPU  float64       // Progress.TargetCPU's: the newest reading (its own, apart from the rate's window)
	rateN    uint64        // and the samples folded when it was taken
	cpuGone  bool          // the target's stat can't be read any more
	maxLag   int64         // ns between the kernel's sample and our read beyond which the read is "late"
	lagSum   int64
	lagN     int64

	// A set's recording (bpf engine): the current sample's process frame
	// (hasRoot), under which markers and stacks are rooted; setAcct: the
	// set's account at the end.
	procRoot int
	hasRoot  bool
	tgid     int // the process of the sample being folded (a set's; 0: the target)
	setAcct  *SetAccount
	setRate  func() (uint64, float64) // the members' samples and CPU seconds over each one's window

	async *asyncAttr // with Async
	green *greenAttr // with Greenlets

	held *heldStart // a command held before its exec (session.Spec.Hold)

	execed   error     // -p PID exec'd: the recording ends, this is its error
	execLost uint64    // samples not named from the program sampled ([lost to the exec])
	execAt   time.Time // sawExec's last look
}

// sawExec reports whether the target exec'd (session.Execed): the
// recording ends there, and what it had not named yet is lost to the exec.
func (r *Recorder) sawExec() bool {
	if r.execed == nil {
		r.execed = r.s.Execed()
		r.execAt = time.Now()
	}
	return r.execed != nil
}

// sawExecSoon is sawExec at most every 5 ms (a read of /proc/PID/stat):
// for the loops that wake at each sample.
func (r *Recorder) sawExecSoon() bool {
	if r.execed == nil && time.Since(r.execAt) < 5*time.Millisecond {
		return false
	}
	return r.sawExec()
}

// lostToExec folds weight samples of tid that cannot be named from the
// program they sampled: taken after its exec, or of code objects read
// too late.
func (r *Recorder) lostToExec(tid int, weight int64) {
	r.execLost += uint64(weight)
	r.marker(tid, "[lost to the exec]", weight)
}

// Run records until opt.Duration passes, ctx is cancelled (Ctrl-C) or the
// target exits, and returns the profile; a cancelled run still returns a
// complete profile.
func Run(ctx context.Context, s *session.Session, opt Options) (*flame.Profile, error) {
	if opt.Freq <= 0 {
		return nil, errors.New("the sampling rate must be positive")
	}
	switch opt.Mode {
	case "", "cpu":
		opt.Mode = "cpu"
	case "wall", "gil":
		if opt.Native || opt.Kernel {
			return nil, fmt.Errorf("--native and --kernel need --mode cpu (they unwind the kernel's CPU samples)")
		}
	default:
		return nil, fmt.Errorf("unknown mode %q (cpu, wall, gil)", opt.Mode)
	}
	var held *heldStart
	if s.Held() {
		var err error
		if held, err = startHeld(ctx, s, opt); err != nil {
			return nil, err
		}
		defer held.close() // the walker, unless the bpf engine took it
	}
	if opt.Mode == "gil" && s.Py != nil && s.Py.FreeThreaded() {
		return nil, fmt.Errorf("--mode gil: %w: use --mode cpu or wall", pyframes.ErrNoGIL)
	}
	r := &Recorder{s: s, opt: opt, tids: s.NewTidMap(), frameIDs: map[[2]uint64]int{}, pending: map[int]pendingSamples{}, held: held}
	// Late: more than two sampling periods (at least 5 ms) after the sample.
	r.maxLag = max(int64(2e9/opt.Freq), int64(5*time.Millisecond))
	r.prof = flame.New(flame.Meta{Command: "record", Mode: opt.Mode, Unit: "samples", Pid: s.Pid,
		Python: s.Py.Version().String(), RequestedHz: float64(opt.Freq), PeriodNS: int64(1e9 / opt.Freq)})
	if opt.Native && !unwind.Supported {
		// The perf register layout and the CFI rules are x86_64's.
		return nil, fmt.Errorf("--native: %w", unwind.ErrArch)
	}
	if opt.Native || opt.Kernel {
		if opt.StackSize == 0 {
			opt.StackSize = DefaultStackSize
		}
		r.opt.StackSize = opt.StackSize
		r.nat = newNative(s.Pid, opt.Native, opt.Kernel)
	}
	if opt.Async {
		if r.nat != nil {
			return nil, errors.New("--async does not combine with --native or --kernel yet")
		}
		var err error
		if r.async, err = newAsync(s.Py); err != nil {
			return nil, err
		}
	}
	if opt.Greenlets {
		if r.nat != nil || r.async != nil {
			return nil, errors.New("--greenlets does not combine with --native, --kernel or --async yet")
		}
		var err error
		if r.green, err = newGreen(s); err != nil {
			return nil, err
		}
	}
	want, err := engineWant(&opt)
	if err != nil {
		return nil, err
	}
	if opt.Native && opt.Mode == "cpu" && want == fallback.Auto && opt.StackSize > BPFMaxStackSize {
		want = fallback.NoBPF
		r.prof.Meta.Fallback = fmt.Sprintf("--native --stack-size %d: the bpf engine copies at most %d bytes: using the perf engine, %s", opt.StackSize, BPFMaxStackSize, UserSpaceNote)
		if opt.OnFallback != nil {
			opt.OnFallback(r.prof.Meta.Fallback)
		}
	}
	if opt.Native && opt.Mode == "cpu" && want == fallback.Auto && s.Py.Version().Minor < 12 {
		// Before 3.12 the kernel walk has no C-stack links (3.11's are in
		// its _PyCFrame chain): its Python runs are glued by counting
		// named eval-loop frames. A binary stripped of that name needs
		// the links the user-space reader takes.
		if found, ok := r.nat.proc.HasSymbol(s.Py.Info.Binary, evalLoop); ok && !found {
			want = fallback.NoBPF
			r.prof.Meta.Fallback = fmt.Sprintf("--native: %s names no %s (stripped): using the perf engine, whose %s carry the C-stack links that find it", s.Py.Info.Binary, evalLoop, UserSpaceNote)
			if opt.OnFallback != nil {
				opt.OnFallback(r.prof.Meta.Fallback)
			}
		}
	}
	if opt.SetRequired && (opt.Mode != "cpu" || want == fallback.NoBPF || opt.Native) {
		return nil, ErrSetNeedsBPF
	}
	r.opt.Engine = opt.Engine
	r.tids.Refresh()
	if opt.Threads {
		r.namer, r.roots = s.NewThreadNamer(true), flame.NewThreadRoots(r.prof)
	}
	setup0 := clock.ObserverCPU() // the set-up's start: the walker's load comes next
	var kr *kernelRec
	if opt.Mode == "cpu" {
		useBPF, why := fallback.Choose(want, func() error {
			var err error
			kr, err = r.openKernel()
			return err
		})
		switch {
		case useBPF:
			r.prof.Meta.Engine = EngineBPF
		case why != nil && want == fallback.BPFOnly:
			return nil, refused(s.Pid, why)
		case why != nil && opt.SetRequired:
			return nil, fmt.Errorf("several processes need the in-kernel stack walker: %w", refused(s.Pid, why))
		default:
			r.prof.Meta.Engine = EnginePerf
			if why != nil {
				r.prof.Meta.Fallback = fallbackLine(why)
				if opt.OnFallback != nil {
					opt.OnFallback(r.prof.Meta.Fallback)
				}
			}
		}
	}
	r.start = time.Now()
	r.tcpu0 = targetCPU(s.Pid)
	switch {
	case kr != nil && held != nil && held.taken:
		// Sampled from the held command's exec: the recording began there.
		r.start, r.tcpu0, setup0 = held.at, held.tcpu0, held.cpu0
		r.prof.Meta.HeldS, r.prof.Meta.HeldLayout = held.waited.Seconds(), held.from
	case !s.Started().IsZero():
		r.prof.Meta.UnobservedS = r.start.Sub(s.Started()).Seconds()
	}
	// What pyobs spent before the recording's loop (the load, or the held
	// command's whole wait) is set-up, reported apart: the recording's
	// own CPU is from here.
	r.cpu0 = clock.ObserverCPU()
	r.setupCPU = r.cpu0 - setup0
	var deadline <-chan time.Time
	if opt.Duration > 0 {
		t := time.NewTimer(max(0, opt.Duration-time.Since(r.start)))
		defer t.Stop()
		deadline = t.C
	}
	if live := kr.live(); live != nil {
		r.stops = procfs.WatchStopsOf(s.FS, live, true) // every member's stops, not the first process's alone
	} else {
		r.stops = procfs.WatchStops(s.FS, s.Pid, true)
	}
	switch {
	case kr != nil:
		err = r.runKernel(ctx, deadline, kr)
	case opt.Mode == "cpu":
		err = r.runCPU(ctx, deadline)
	default:
		err = r.runTimer(ctx, deadline)
	}
	r.prof.Meta.Stopped = metaStopped(r.stops.End())
	if a := r.setAcct; a != nil {
		each := r.stops.Each()
		for i := range a.Processes {
			a.Processes[i].Stopped = metaStopped(each[a.Processes[i].Pid])
		}
	}
	r.finish()
	if err == nil && r.sawExec() {
		// What was read before the exec is the profile; the error says
		// what the target became (exit status 3).
		err = r.execed
	}
	return r.prof, err
}

// stopped reports whether the recording should end now.
func (r *Recorder) stopped(ctx context.Context, deadline <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return true
	case <-deadline:
		return true
	default:
	}
	if r.s.Spawned() {
		select {
		case <-r.s.Exited():
			return true
		default:
		}
	}
	return r.sawExecSoon()
}

func (r *Recorder) runCPU(ctx context.Context, deadline <-chan time.Time) error {
	// One OS thread does all the waiting and reading: no hand-offs between
	// Go's threads on every wake-up.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Wake about 1000 times a second at most; samples of one thread that
	// arrive together are read once (see pending).
	cfg := perfevent.SamplerConfig{Freq: r.opt.Freq, WakeEvery: max(1, r.opt.Freq/1000), Switches: r.nat == nil}
	if r.nat != nil {
		if r.opt.Native {
			cfg.RegsUser, cfg.StackUser = perfevent.RegsGeneral, r.opt.StackSize
		}
		cfg.Callchain, cfg.KernelCallchainOnly = r.opt.Kernel, true
	}
	sm, err := perfevent.NewSampler(cfg)
	if err != nil {
		return err
	}
	defer sm.Close()
	format := sm.Format()
	addThreads := func() error {
		tids, err := r.s.FS.Tasks(r.s.Pid)
		if err != nil {
			return nil // exiting: the loop notices
		}
		for _, tid := range tids {
			if err := sm.AddThread(tid); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // exited meanwhile
				}
				return perfError(r.s.Pid, err)
			}
		}
		return nil
	}
	if err := addThreads(); err != nil {
		return err
	}
	handle := func(tid int, rec perfevent.RawRecord) {
		switch rec.Type {
		case perfevent.RecordSample:
			smp, err := perfevent.DecodeSampleFormat(rec.Body, format)
			if err != nil {
				r.failed++
				return
			}
			p := r.pending[int(smp.Tid)]
			p.count++
			p.newest = max(p.newest, int64(smp.Time))
			if r.nat != nil {
				// Each sample keeps its own native stack, unwound now:
				// its stack copy lives only as long as the ring record.
				p.natives = append(p.natives, r.nat.capture(&smp))
			}
			r.pending[int(smp.Tid)] = p
		case perfevent.RecordSwitch:
			// The thread blocked (a voluntary switch-out) after its pending
			// samples: a stack read now shows where it waits, not where it
			// was sampled. Those samples are stale. (Preemption leaves the
			// stack as it was, so it does not count.)
			if rec.Misc&perfevent.SwitchOut != 0 && rec.Misc&perfevent.SwitchOutPreempt == 0 && r.nat == nil {
				if p, ok := r.pending[tid]; ok && p.count > 0 {
					p.stale += p.count
					p.count = 0
					r.pending[tid] = p
				}
			}
		case perfevent.RecordLost:
			if n, err := perfevent.DecodeLost(rec.Body); err == nil {
				r.lost += n
			}
		case perfevent.RecordThrottle:
			r.throt++
		}
	}
	lastCheck, lastScan := time.Now(), time.Now()
	for !r.stopped(ctx, deadline) {
		if err := sm.Poll(10, handle); err != nil {
			return err
		}
		r.readPending()
		r.lookNames(time.Now())
		if time.Since(lastScan) > 50*time.Millisecond {
			// New threads get their event within ~50 ms of appearing.
			lastScan = time.Now()
			if err := addThreads(); err != nil {
				return err
			}
		}
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			r.achieved() // refreshes the target's CPU time while it can still be read
			if !r.s.Alive() {
				r.targetEnded = true
				break
			}
			r.progress()
		}
	}
	err = sm.DrainAll(handle)
	r.readPending()
	return err
}

// pendingSamples are the kernel's samples of one thread collected in one
// drain of the rings.
type pendingSamples struct {
	count   int64
	stale   int64          // samples taken before the thread blocked: not readable any more
	newest  int64          // CLOCK_MONOTONIC ns of the newest sample
	natives []nativeSample // with --native/--kernel: each sample's own stacks
}

// readPending reads each sampled thread's stack once and gives it the
// samples that arrived for that thread since the last read. A read long
// after even the newest of them may show where the thread went next (e.g.
// into a sleep): those samples count as late, under a marker.
func (r *Recorder) readPending() {
	now := clock.MonoNow()
	if r.async != nil {
		r.async.newDrain()
	}
	if r.green != nil {
		r.green.newDrain()
	}
	defer func() {
		if r.nat != nil {
			r.nat.slab, r.nat.sps = r.nat.slab[:0], r.nat.sps[:0]
		}
	}()
	execed := r.sawExec()
	for tid, p := range r.pending {
		delete(r.pending, tid)
		if execed {
			r.lostToExec(tid, p.count+p.stale+int64(len(p.natives)))
			continue
		}
		lag := now - p.newest
		if r.nat != nil {
			if lag > 0 && lag <= r.maxLag {
				r.lagSum += lag
				r.lagN++
			}
			r.sampleNative(tid, p.natives, lag > r.maxLag)
			continue
		}
		if p.stale > 0 {
			r.late += uint64(p.stale)
			r.marker(tid, "[blocked before read]", p.stale)
		}
		if p.count == 0 {
			continue
		}
		r.reads++
		if lag > r.maxLag {
			r.late += uint64(p.count)
			r.marker(tid, "[late read]", p.count)
			continue
		}
		if lag > 0 {
			r.lagSum += lag
			r.lagN++
		}
		r.sampleThread(tid, p.count)
	}
}

func (r *Recorder) runTimer(ctx context.Context, deadline <-chan time.Time) error {
	tick := time.NewTicker(time.Second / time.Duration(r.opt.Freq))
	defer tick.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return nil
		case <-tick.C:
		}
		if r.stopped(ctx, deadline) {
			return nil
		}
		if r.async != nil {
			r.async.newDrain()
		}
		if r.green != nil {
			r.green.newDrain()
		}
		if r.opt.Mode == "gil" {
			r.sampleGIL()
		} else {
			r.sampleWall()
		}
		r.lookNames(time.Now())
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			r.tids.Refresh()
			if !r.s.Alive() {
				r.targetEnded = true
				return nil
			}
			r.progress()
		}
	}
}

func (r *Recorder) sampleWall() {
	for _, ref := range r.tids.All() {
		state := "?"
		if st, err := r.s.FS.TaskState(r.s.Pid, ref.NativeID); err == nil {
			state = st.Describe()
			if i := strings.Index(state, " ("); i > 0 {
				state = state[:i] // "sleeping in futex_wait_queue": keep wchan, drop the syscall
			}
		}
		r.sampleRef(ref, state, 1)
	}
}

func (r *Recorder) sampleGIL() {
	h := r.s.Py.GILHolder()
	if h == 0 {
		r.samples++
		r.prof.AddIDs([]int{r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[GIL free]"})}, 1)
		return
	}
	for _, ref := range r.tids.All() {
		if ref.Addr == h {
			r.sampleRef(ref, "", 1)
			return
		}
	}
	r.tids.Refresh()
	r.samples++
	r.failed++
	r.prof.AddIDs([]int{r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[unreadable]"})}, 1)
}

// sampleThread handles one CPU sample of tid.
func (r *Recorder) sampleThread(tid int, weight int64) {
	ref, ok := r.tids.Lookup(tid)
	if !ok {
		r.marker(tid, "[no Python thread state]", weight)
		return
	}
	r.sampleRef(ref, "", weight)
}

// marker folds a sample of tid whose Python stack is not known, under a
// marker frame (rooted at its thread with --threads).
func (r *Recorder) marker(tid int, what string, weight int64) {
	r.samples += uint64(weight)
	ids := r.rootIDs()
	if r.opt.Threads {
		ids = append(ids, r.threadFrame(tid))
	}
	if r.natCur != nil {
		// bpf engine, --native: the sample's native stack under the marker.
		ids = r.nat.stack(r.prof, ids, *r.natCur, nil, r.prof.Intern(flame.Frame{Kind: flame.State, Function: what}))
	} else {
		ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: what}))
	}
	ids = append(ids, r.kern...)        // bpf engine, --kernel: where in the kernel
	r.prof.AddIDsN(ids, weight, weight) // a sample weighs one: weight samples
	r.ids = ids
}

// rootIDs starts a stack in r.ids: the process frame when a set's sample
// is being folded, else empty.
func (r *Recorder) rootIDs() []int {
	ids := r.ids[:0]
	if r.hasRoot {
		ids = append(ids, r.procRoot)
	}
	return ids
}

func (r *Recorder) sampleRef(ref pyframes.ThreadRef, state string, weight int64) {
	r.samples += uint64(weight)
	var task uint64
	if r.async != nil {
		task = r.async.running(ref.Addr)
	}
	var green uint64
	if r.green != nil {
		green = r.green.running(ref.Addr)
	}
	partial := r.green != nil && r.green.partial(ref.Addr, green)
	frames, consistent, snapshot, err := r.s.Py.Stack(ref.Addr, pyframes.Options{Retries: 1, Snapshot: true, Reuse: true, Partial: partial})
	if snapshot {
		r.moved += uint64(weight)
		consistent = true
	}
	ids := r.ids[:0]
	if r.opt.Threads {
		ids = append(ids, r.threadFrame(ref.NativeID))
	}
	if errors.Is(err, pyframes.ErrTruncated) {
		// Deeper than the walker goes: its innermost frames, under the
		// marker the kernel walker uses for the same.
		ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: markerTruncated}))
		err = nil
	}
	switch {
	case err != nil && !errors.Is(err, pyframes.ErrTorn):
		r.failed += uint64(weight)
		ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[unreadable]"}))
	case !consistent:
		// Never fold a stack that changed while it was read: its weight is
		// kept, under a marker, so the graph shows what was missed.
		r.torn += uint64(weight)
		ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[torn read]"}))
	default:
		keep := len(frames) - 1
		if r.async != nil {
			ids, keep = r.async.root(r.prof, ids, ref.Addr, task, frames, weight)
		}
		if r.green != nil {
			ids = r.green.root(r.prof, ids, ref.Addr, green, frames, weight)
		}
		for i := keep; i >= 0; i-- {
			f := frames[i]
			k := [2]uint64{f.CodeID, uint64(f.Line)}
			id, ok := r.frameIDs[k]
			if !ok {
				id = r.prof.Intern(flame.Frame{Kind: flame.Python, Function: f.Function, File: f.File, Line: f.Line})
				r.frameIDs[k] = id
			}
			ids = append(ids, id)
		}
		if len(frames) == 0 {
			ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python frames]"}))
		}
	}
	if state != "" {
		ids = append(ids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[" + state + "]"}))
	}
	r.prof.AddIDs(ids, weight)
	r.ids = ids
}

// threadFrame is tid's root frame (--threads): one per thread, named
// when its name is learned, whenever that is.
func (r *Recorder) threadFrame(tid int) int {
	if r.tgid != 0 && r.tgid != r.s.Pid {
		// Another member of a set: named through its own interpreter.
		var py *pyframes.Process
		if r.memberPy != nil {
			py = r.memberPy(r.tgid)
		}
		gen, name := r.members.Thread(r.tgid, tid, py)
		return r.roots.ID(flame.ThreadKey{Pid: r.tgid, Tid: tid, Gen: gen}, name)
	}
	k := session.ThreadGen{Tid: tid, Gen: r.namer.Gen(tid)}
	return r.roots.ID(flame.ThreadKey{Tid: tid, Gen: k.Gen}, r.namer.Name(k))
}

// lookNames reads the target's thread names when due (--threads) and
// relabels the roots of the threads named since (their earlier samples
// included).
func (r *Recorder) lookNames(now time.Time) {
	if r.namer == nil {
		return
	}
	for _, k := range r.namer.Look(now) {
		r.roots.Relabel(flame.ThreadKey{Tid: k.Tid, Gen: k.Gen}, r.namer.Name(k))
	}
	r.members.Look(now, func(pid int, k session.ThreadGen, name string) {
		r.roots.Relabel(flame.ThreadKey{Pid: pid, Tid: k.Tid, Gen: k.Gen}, name)
	})
}

func (r *Recorder) progress() {
	if r.opt.Progress == nil && r.opt.Stream == nil {
		return
	}
	p := Progress{Elapsed: time.Since(r.start), TargetCPU: r.targetCPU(), Samples: r.samples, AchievedHz: r.achieved(),
		Lost: r.lost, Torn: r.torn, Late: r.late, ObserverCPU: clock.ObserverCPU() - r.cpu0}
	if r.stops != nil {
		p.StoppedS = r.stops.Seconds()
	}
	if r.opt.Progress != nil {
		r.opt.Progress(p)
	}
	r.stream(p)
}

// targetCPU is the target's CPU seconds since the recording began: the
// newest /proc/PID/stat reading (the last one kept: the file is gone once
// the target is reaped), or a spawned program's whole account read at its
// exit (wait4's rusage); a set's members' sum.
func (r *Recorder) targetCPU() float64 {
	if r.setRate != nil {
		_, c := r.setRate()
		return c
	}
	if c := targetCPU(r.s.Pid); c > r.progCPU {
		r.progCPU = c
	}
	if c, ok := r.s.ExitOwnCPU(); ok && c > r.progCPU {
		r.progCPU = c
	}
	return max(0, r.progCPU-r.tcpu0)
}

// achieved: cpu mode — samples per second of target CPU time (the kernel
// samples on-CPU time); wall/gil — ticks per wall second.
//
// cpu mode counts the samples and the CPU over one window: up to the last
// reading of the target's CPU. A target that exits takes its /proc/PID/stat
// with it: the CPU it used after the last reading is not known, so the
// samples folded since are not counted either (they stay in the profile).
// A spawned program's account at its exit (wait4) holds every sample.
func (r *Recorder) achieved() float64 {
	if r.opt.Mode == "cpu" {
		n, cpu := r.rateWindow()
		if cpu <= 0 {
			return 0
		}
		return float64(n) / cpu
	}
	el := time.Since(r.start).Seconds()
	if r.opt.Mode == "wall" {
		n := float64(len(r.tids.All()))
		if n == 0 {
			return 0
		}
		return float64(r.samples) / n / el
	}
	return float64(r.samples) / el
}

// rateWindow is cpu mode's samples and target CPU seconds over one window,
// the CPU read now if it still can be.
func (r *Recorder) rateWindow() (uint64, float64) {
	if r.setRate != nil {
		return r.setRate()
	}
	if c, ok := r.s.ExitOwnCPU(); ok {
		r.lastCPU, r.rateN = c, r.samples // a spawned program's whole account, read at its exit
	} else if !r.cpuGone {
		// Alive, or a zombie (its account complete). Once its stat is
		// gone, or reads less than before (its pid taken by another
		// process), the last reading stands.
		if st, err := procfs.Default().Stat(r.s.Pid); err == nil && st.CPUSeconds() >= r.lastCPU {
			r.lastCPU, r.rateN = st.CPUSeconds(), r.samples
		} else {
			r.cpuGone = true
		}
	}
	return r.rateN, r.lastCPU - r.tcpu0
}

func (r *Recorder) finish() {
	r.lookNames(time.Now()) // the last names, if the target still runs
	if r.s.Spawned() && !r.s.Alive() {
		// Exited: its account comes with its reaping, a moment away.
		select {
		case <-r.s.Exited():
		case <-time.After(time.Second):
		}
	}
	m := &r.prof.Meta
	end, endCPU := time.Since(r.start), r.targetCPU()
	m.DurationS = end.Seconds()
	m.Samples, m.Lost, m.Torn, m.Failed, m.Throttled, m.Late, m.Moved = r.samples, r.lost, r.torn, r.failed, r.throt, r.late, r.moved
	m.StackReads = r.reads
	if r.execed != nil {
		var xe *session.ExecedError
		if errors.As(r.execed, &xe) {
			m.Execed = xe.Now()
		}
		m.LostToExec = r.execLost
	}
	if r.lagN > 0 {
		m.ReadLagUS = float64(r.lagSum) / float64(r.lagN) / 1e3
	}
	m.TargetExited = r.targetEnded && !r.s.Spawned() && r.execed == nil
	m.AchievedHz = r.achieved()
	m.ObserverCPUS = (clock.ObserverCPU() - r.cpu0).Seconds()
	m.ObserverSetupCPUS = r.setupCPU.Seconds()
	if r.nat != nil {
		r.nat.finish(m, r.opt.StackSize)
	}
	if r.async != nil && r.opt.AsyncStats != nil {
		*r.opt.AsyncStats = r.async.finish()
	}
	if r.green != nil && r.opt.GreenletStats != nil {
		*r.opt.GreenletStats = r.green.finish()
	}
	if a := r.setAcct; a != nil {
		if a.Counts.Seen <= 1 {
			// One process after all (-- CMD that forked nothing): the
			// profile one process gives, without its process frame.
			r.prof = flame.WithoutRoots(r.prof)
		}
		if (a.Counts.Seen > 1 || r.opt.SetRequired) && r.opt.SetAccount != nil {
			*r.opt.SetAccount = *a
		}
	}
	if r.opt.End != nil {
		p := Progress{Elapsed: end, TargetCPU: endCPU, Samples: m.Samples, AchievedHz: m.AchievedHz,
			Lost: m.Lost, Torn: m.Torn, Late: m.Late, ObserverCPU: time.Duration(m.ObserverCPUS * float64(time.Second))}
		if m.Stopped != nil {
			p.StoppedS = m.Stopped.Seconds
		}
		r.opt.End(p)
	}
}

// targetCPU is the process's user+system CPU seconds from /proc/PID/stat
// (dead threads included).
func targetCPU(pid int) float64 {
	st, err := procfs.Default().Stat(pid)
	if err != nil {
		return 0
	}
	return st.CPUSeconds()
}

func perfError(pid int, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return &capability.GateError{
			Op:   fmt.Sprintf("open perf events on pid %d", pid),
			Gate: fmt.Sprintf("kernel.perf_event_paranoid=%d without CAP_PERFMON", capability.PerfEventParanoid()),
			Fix:  "run as root, grant CAP_PERFMON (setcap cap_perfmon+ep on pyobs), or lower it: sysctl kernel.perf_event_paranoid=1",
			Err:  errors.Join(capability.ErrPermission, err),
		}
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// ErrSetNeedsBPF: several processes were asked of a mode or engine that
// reads one process from user space (bad flags: the caller says so).
var ErrSetNeedsBPF = errors.New("several processes (several -p, --children, --cgroup, --all) are recorded by cpu mode's bpf engine; --native, --async, --greenlets, --engine perf, wall and gil read one process from user space")
