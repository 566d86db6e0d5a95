//go:build amd64

package offcpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/unwind"
)

type pyRec struct {
	ids   []int  // root first (thread frame included with --threads)
	class string // from procfs at read time; "" when the kernel's hints decide
	kern  []int  // kernel frames from /proc/TID/stack (waits older than the attach)
}

type bthr struct {
	tid    int
	state0 string // /proc state at the attach
	pre    uint32 // Python stack id of the wait in progress at the attach
	lastTS uint64 // switch-out time of the last wait looked at
	acc    thr
	// The scheduler's run time (schedstat) at the attach and at the end,
	// for threads that lived through the window: the check on on-CPU time.
	run0, run1         int64
	haveRun0, haveRun1 bool
}

type bpfEngine struct {
	*engine
	tr      *schedbpf.Tracer
	t0      int64
	ths     map[int]*bthr
	done    []ThreadStat
	recs    []pyRec
	recIdx  map[string]uint32
	ksyms   *procfs.Kallsyms
	kcache  map[int32]kstack // whole stacks, root first
	ucache  map[uint64]int
	uproc   *unwind.Process
	bres    BPFStats
	pyidErr uint64
	lastSeq uint64
	swept   map[uint32]bool // tids folded and deleted as exited
	dying   map[uint32]bool // tids unlisted before their final switch-out: folded at the next sweep
	kp      *kpy            // the kernel's Python stacks; nil: read from user space
	set     *offSet         // a set of processes (s.Set.Many()); nil: the target alone
	stopAt  int64           // the window's end, once the program stopped counting
}

// reuseKernelStack: how long a thread blocking again in the same syscall on
// the same first argument (fd, futex word) reuses its last kernel stack
// instead of walking it again — the walk is the program's main cost on a
// switch-heavy target (measured: BENCHMARKS.md).
const reuseKernelStack = 10 * time.Millisecond

// kernelWalkLook is the look period with the kernel walk (else opt.Drain).
const kernelWalkLook = 20 * time.Millisecond

type kstack struct {
	ids   []int
	names []string
	// keep: how many frames (root first) lie outside the scheduler's own
	// (the outermost __schedule and what it calls): a wait's view.
	keep int
}

// RunBPF is Run on the eBPF engine. An error wrapping
// schedbpf.ErrUnavailable (nil result) means nothing was attached: the
// caller may fall back to Run (a held command is still held then).
func RunBPF(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	if s.Held() {
		return runHeld(ctx, s, opt)
	}
	e := newBPFEngine(s, opt)
	e.gilLo, e.gilHi = s.Py.GILRange()
	stop, note := runStats()
	defer stop()
	e.bres.BPFStats = note
	walk, kl, why := e.walkConfig()
	cfg := loadConfig(s, e.opt, walk, e.gilLo, e.gilHi)
	attached := func() int64 {
		e.t0 = clock.MonoNow()
		e.schedRun(func(th *bthr, v int64) { th.run0, th.haveRun0 = v, true })
		return e.t0
	}
	tr, err := schedbpf.Load(cfg, attached)
	if err != nil && walk != nil {
		// The walk is what a kernel may refuse (bpf_loop: 5.17+): the
		// engine without it still has every wait's time and class.
		cfg.Walk = nil
		why = fmt.Sprintf("the kernel refused the program with the stack walk (%v)", err)
		tr, err = schedbpf.Load(cfg, attached)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	e.tr = tr
	defer tr.Close()
	return e.run(ctx, cfg.Walk != nil, kl, why, true)
}

// runHeld observes a command held before its exec from its first
// instruction: the program is loaded and attached while it is held, armed
// by its exec (nothing of the holder is recorded), and the walk configured
// once its interpreter is up — the waits before that keep their time,
// class and kernel stack, and carry [before the interpreter] (or their
// stack read from user space, when they are still going on once it is
// up).
func runHeld(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	cfg := loadConfig(s, opt, nil, 0, 0) // the GIL range and the process's addresses come with the interpreter
	cfg.Late, cfg.HeldPid = !opt.NoKernelWalk, uint32(s.Pid)
	// The layout, when the command's files name their interpreter: the
	// program's verifier then sees it as constants (a fraction of a second
	// of load instead of seconds while the command waits).
	var read *pyframes.KernelLayout
	from := ""
	if cfg.Late {
		kl, path, err := s.HeldLayout()
		if err == nil {
			var w any
			if w, err = kwalk.ProgramConfig(s.Pid, kl, kwalk.MaxFrames, nil); err == nil {
				cfg.Walk, read, from = w, kl, kwalk.LayoutRead(path)
			}
		}
		if err != nil {
			from = kwalk.LayoutOnceUp("the command's files: " + err.Error())
		}
	}
	stop, statsNote := runStats()
	defer stop()
	why := ""
	tr, err := schedbpf.Load(cfg, nil)
	if err != nil && cfg.Walk != nil {
		// The layout after the load, then.
		from = kwalk.LayoutOnceUp("loaded with the layout read before the exec: " + err.Error())
		cfg.Walk, read = nil, nil
		tr, err = schedbpf.Load(cfg, nil)
	}
	if err != nil && cfg.Late {
		cfg.Late = false
		why = fmt.Sprintf("the kernel refused the program with the stack walk (%v)", err)
		tr, err = schedbpf.Load(cfg, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	defer tr.Close()
	if err := s.Release(); err != nil {
		return nil, err
	}
	t0, ok := tr.Attached()
	if !ok {
		return nil, fmt.Errorf("pid %d: the offcpu program saw no exec of the released command", s.Pid)
	}
	if err := s.WaitPython(ctx, 0); err != nil {
		return nil, err
	}
	e := newBPFEngine(s, opt)
	e.bres.BPFStats = statsNote
	e.bres.HeldS = s.HeldFor().Seconds()
	if cfg.Late {
		e.bres.HeldLayout = from
	}
	e.t0, e.tr = t0, tr
	e.gilLo, e.gilHi = s.Py.GILRange()
	if err := tr.SetGIL(e.gilLo, e.gilHi); err != nil {
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	var walk any
	var kl *pyframes.KernelLayout
	if cfg.Late {
		walk, kl, why = e.walkConfig()
		switch {
		case walk == nil:
		case tr.AddrsLate():
			if err := kwalk.CheckBuild(s.Pid, read, kl); err != nil {
				walk, kl, why = nil, nil, err.Error()
				break
			}
			a := kwalk.LateAddrs(walk)
			if err := tr.SetAddrs(a, kwalk.LateReady(a)); err != nil {
				return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
			}
		default:
			if err := tr.SetWalk(kwalk.Dormant(walk), walk); err != nil {
				return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
			}
		}
	}
	return e.run(ctx, walk != nil, kl, why, false)
}

func newBPFEngine(s *session.Session, opt Options) *bpfEngine {
	e := &bpfEngine{engine: newEngine(s, opt, EngineBPF),
		ths: map[int]*bthr{}, recIdx: map[string]uint32{}, kcache: map[int32]kstack{}, ucache: map[uint64]int{}}
	return e
}

// runStats turns on the kernel's BPF run-time stats for the run (stop
// turns them off again); note says how they stand.
func runStats() (stop func(), note string) {
	c, note := bpfload.EnableRunStats()
	if c == nil {
		return func() {}, note
	}
	return func() { c.Close() }, note
}

// loadConfig is the program's configuration for s (its set, when it
// observes one).
func loadConfig(s *session.Session, opt Options, walk any, gilLo, gilHi uint64) schedbpf.Config {
	cfg := schedbpf.Config{Tgid: uint32(s.Pid), GILLo: gilLo, GILHi: gilHi, Walk: walk,
		MinBlockNS: uint64(max(opt.MinBlock.Nanoseconds(), 0)), MapEntries: opt.MapEntries, ReuseNS: uint64(reuseKernelStack), Waker: opt.Waker}
	if s.Set.Many() {
		so := s.Options()
		cfg.Tgid, cfg.Set = 0, &so
	}
	// -p PID alone: its exec ends the window in the kernel.
	cfg.EndAtExec = !s.Spawned() && !s.Set.Many()
	return cfg
}

// run reads the loaded program until the window ends: walked says
// whether switch-outs walk the Python stack (kl its layout; why, when
// not); before: read the threads off CPU at the attach (not for a held
// command: nothing of it began before).
func (e *bpfEngine) run(ctx context.Context, walked bool, kl *pyframes.KernelLayout, why string, before bool) (*Result, error) {
	s, opt, tr := e.s, e.opt, e.tr
	var err error
	if tr.Set != nil {
		e.newSet(tr.Set, kl)
	}
	if walked {
		if err := e.openKernelWalk(kl); err != nil {
			return nil, err
		}
	}
	e.bres.KernelWalk = &KernelWalk{Why: why}
	e.bres.Attach, e.bres.SyscallHints = tr.Attach, tr.Regs
	if opt.Waker {
		e.bres.WakeAttach = tr.WakeAt
	}

	cpu0 := clock.ObserverCPU()
	if before {
		e.readBefore()
	}
	var deadline <-chan time.Time
	if opt.Duration > 0 {
		t := time.NewTimer(opt.Duration - time.Duration(clock.MonoNow()-e.t0))
		defer t.Stop()
		deadline = t.C
	}
	lastSweep, lastCheck, lastScan := time.Now(), time.Now(), time.Now()
	every := sweepChurn // the first sweep soon: a churning target is told at once
	drain := opt.Drain
	if e.kp != nil && e.bres.SyscallHints && drain < kernelWalkLook {
		// Every switch-out has its Python stack from the kernel and its
		// class from the syscall hints: the looks only serve threads the
		// walk could not read, and new stacks' names (code objects live
		// far longer than this).
		drain = kernelWalkLook
	}
	if drain < 5*time.Millisecond {
		// Millisecond looks: a plain nanosleep on a thread of our own
		// (nap), no Go timer, no hand-off.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	for !ended(ctx, deadline, s) {
		members := false
		if drain >= 5*time.Millisecond {
			// A Go sleep parks the thread and gives the P back: a
			// nanosleep syscall this long would be handed off by the
			// runtime's monitor, which then polls at 20 µs for as long as
			// the loop runs (a third of the engine's CPU, measured).
			members = e.sleep(drain)
		} else {
			nap(drain)
		}
		if members && e.kp != nil {
			// A member's new program: its addresses and threads in the
			// kernel's maps while it starts (its walks fail their checks
			// until then).
			e.refreshWalkThreads(true)
		}
		if err = e.poll(); err != nil {
			break
		}
		e.drainPy()
		e.lookNames()
		if time.Since(lastScan) > max(50*time.Millisecond, drain) {
			lastScan = time.Now()
			_ = e.memberTasks(func(_, tid int) { e.thread(tid) })
			e.learnBPF()
			e.refreshWalkThreads(false)
		}
		if time.Since(lastSweep) > every {
			lastSweep = time.Now()
			before := e.bres.SweptThreads
			if err = e.sweep(false, 0); err != nil {
				break
			}
			// Threads come and go: sweep often, before they fill the maps.
			every = sweepEvery
			if e.bres.SweptThreads > before {
				every = sweepChurn
			}
		}
		if tr.ExecAt() != 0 {
			break // -p PID exec'd: the kernel ended the window there
		}
		if time.Since(lastCheck) > 200*time.Millisecond {
			lastCheck = time.Now()
			if !s.Alive() {
				break
			}
		}
	}
	e.lookNames() // the last names, if the target still runs
	end := clock.MonoNow()
	if x := tr.ExecAt(); x != 0 && x < end {
		end = x // what was in progress at the exec ends there
	}
	e.schedRun(func(th *bthr, v int64) { th.run1, th.haveRun1 = v, true })
	if serr := tr.Stop(end); err == nil {
		err = serr
	}
	e.stopAt = end
	tr.Detach()
	e.drainPy()
	// Exited threads first, so that the maps' fill at the end shows what
	// the live threads hold (no leak), then everything.
	if serr := e.sweep(false, 0); err == nil {
		err = serr
	}
	if serr := e.sweep(true, end); err == nil {
		err = serr
	}
	e.res.WindowS = float64(end-e.t0) / 1e9
	e.res.ObserverCPUS = (clock.ObserverCPU() - cpu0).Seconds()
	e.counters()
	e.res.BPF = &e.bres
	m := &e.prof.Meta
	m.DurationS = e.res.WindowS
	m.Samples = e.res.Switches
	m.Lost = e.res.Lost
	m.StackReads = e.res.Looks
	m.ObserverCPUS = e.res.ObserverCPUS
	if e.bres.KernelSymbols != "" {
		m.MixedMeta().KernelSymbols = e.bres.KernelSymbols
	}
	e.account()
	e.res.Profile = e.prof
	if err == nil {
		err = e.execed()
	}
	return &e.res, err
}

// sweepEvery is how often the maps are read for exited threads' entries:
// each sweep reads every entry of the waits map (thousands of distinct
// stacks on a busy target), so its price grows with the map; a thread
// that exited waits at most this long to be folded and freed. A sweep
// that reclaimed an exited thread makes the next one come after
// sweepChurn: a target that churns threads is swept ten times a second
// (TestOffcpuBPFThreadChurn: maps of 128 entries keep up).
const (
	sweepEvery = time.Second
	sweepChurn = 100 * time.Millisecond
)

func (e *bpfEngine) thread(tid int) *bthr {
	th := e.ths[tid]
	if th == nil {
		th = &bthr{tid: tid, acc: thr{tid: tid, classNS: map[string]int64{}}}
		e.ths[tid] = th
		delete(e.swept, uint32(tid)) // listed alive again: a new thread with a reused tid
	}
	return th
}

// readBefore reads the Python stack and wait reason of every thread that
// is off CPU at the attach and hands the kernel its id, keyed by the
// attach time (what the kernel keys such a wait's start by).
func (e *bpfEngine) readBefore() {
	for _, pid := range e.livePids() {
		e.readBeforeOf(pid)
	}
}

// readBeforeOf is readBefore for the threads of one process: the target,
// or another member of a set (its stack read through its own reader).
// Every thread's state at the attach is kept (state0): one that then has
// no event all window is judged by it, on or off CPU.
func (e *bpfEngine) readBeforeOf(pid int) {
	tids, err := e.s.FS.Tasks(pid)
	if err != nil {
		return
	}
	var refs *memberRefs // another member's thread states, read once for all its threads
	for _, tid := range tids {
		th := e.thread(tid)
		w := readWait(e.opt.FS, pid, tid)
		th.state0 = w.State
		if w.State == "Z" || w.State == "X" {
			// A thread that exited before the window (a main thread ended
			// by pthread_exit stays listed, a zombie, while the others
			// run): no wait of its, and its stack is the one it died with.
			th.acc.gone = true
			continue
		}
		if w.State == "R" || w.State == "" {
			continue
		}
		e.res.Looks++
		var ids []int
		if pid == e.s.Pid {
			ids = e.stack(tid, nil)
		} else {
			if refs == nil {
				refs = e.memberThreads(pid)
			}
			ids = e.memberStack(refs, tid)
		}
		rec := pyRec{ids: ids, class: Classify(w, e.gilLo, e.gilHi), kern: e.procKernelStack(pid, tid)}
		id := e.intern(rec)
		pk := schedbpf.Pkey{Tid: uint32(tid), Ts: uint64(e.t0)}
		if err := e.tr.Pyids.Update(pk, id, ebpf.UpdateAny); err != nil {
			e.pyidErr++
			continue
		}
		// Still no event for it: it stayed off CPU during the read.
		var t schedbpf.Thr
		if e.tr.Threads.Lookup(uint32(tid), &t) == nil {
			if e.tr.Pyids.Delete(pk) == nil {
				e.res.LookRetries++
			}
			continue
		}
		th.pre = id
	}
}

// poll looks at the threads that are off CPU now: each new wait gets its
// Python stack read and handed to the kernel, which keys the wait under it
// at the switch-in — if the thread was still off CPU once the id was in
// place (the read was consistent), else the id is taken back.
func (e *bpfEngine) poll() error {
	type ent struct {
		tid uint32
		st  schedbpf.Start
	}
	if seq, ok := e.tr.OutSeq(); ok {
		if seq == e.lastSeq {
			return nil // no switch-out since the last look
		}
		e.lastSeq = seq
	}
	var ents []ent
	if len(e.ths) <= 64 {
		// A batch walks (and locks) every bucket of the map: for a few
		// threads, one lookup each is far cheaper.
		for tid := range e.ths {
			var st schedbpf.Start
			if e.tr.Starts.Lookup(uint32(tid), &st) == nil {
				ents = append(ents, ent{uint32(tid), st})
			}
		}
	} else if err := batchAll(e.tr.Starts, func(k uint32, v schedbpf.Start) { ents = append(ents, ent{k, v}) }); err != nil {
		return fmt.Errorf("pid %d: read map starts: %w", e.s.Pid, err)
	}
	for _, en := range ents {
		tid := int(en.tid)
		th := e.thread(tid)
		if en.st.Ts == th.lastTS || en.st.Pyk != 0 {
			continue // looked at already, or walked in the kernel
		}
		if e.set != nil && e.pidOfTid(tid) != e.s.Pid {
			continue // another member: its memory is read by the kernel walk only
		}
		th.lastTS = en.st.Ts
		e.res.Looks++
		rec := pyRec{}
		if en.st.Flags&(schedbpf.FlagRegs|schedbpf.FlagRunQueue) == 0 {
			w := readWait(e.opt.FS, e.s.Pid, tid)
			if w.Woken {
				e.res.LookRetries++ // its wait ended before the read: nothing to class
				continue
			}
			rec.class = Classify(w, e.gilLo, e.gilHi)
		}
		rec.ids = e.stack(tid, nil)
		id := e.intern(rec)
		pk := schedbpf.Pkey{Tid: en.tid, Ts: en.st.Ts}
		if err := e.tr.Pyids.Update(pk, id, ebpf.UpdateAny); err != nil {
			e.pyidErr++
			continue
		}
		var now schedbpf.Start
		if err := e.tr.Starts.Lookup(en.tid, &now); err != nil || now.Ts != en.st.Ts {
			// It ran: either the kernel took the id at the switch-in (then
			// the read was finished before it ran) or it ran first.
			if e.tr.Pyids.Delete(pk) == nil {
				e.res.LookRetries++
			}
		}
	}
	return nil
}

func (e *bpfEngine) intern(r pyRec) uint32 {
	var b strings.Builder
	b.WriteString(r.class)
	for _, l := range [][]int{r.ids, r.kern} {
		b.WriteByte('|')
		for _, id := range l {
			b.WriteString(strconv.Itoa(id))
			b.WriteByte(',')
		}
	}
	k := b.String()
	if id, ok := e.recIdx[k]; ok {
		return id
	}
	e.recs = append(e.recs, r)
	id := uint32(len(e.recs))
	e.recIdx[k] = id
	return id
}

type waitEnt struct {
	k schedbpf.Wkey
	v schedbpf.Wval
}

type wokeEnt struct {
	k schedbpf.Okey
	v schedbpf.Wval
}

// sweep folds the entries of exited threads and deletes them from the
// maps (so a process that churns threads does not fill them); final folds
// everything, closing the waits and runs still open at end.
func (e *bpfEngine) sweep(final bool, end int64) error {
	byTid, woke, totals, err := e.readThreadMaps()
	if err != nil {
		return err
	}
	if final {
		e.mapUse()
		starts := map[uint32]schedbpf.Start{}
		if err := batchAll(e.tr.Starts, func(k uint32, v schedbpf.Start) { starts[k] = v }); err != nil {
			return fmt.Errorf("pid %d: read map starts: %w", e.s.Pid, err)
		}
		for tid := range totals {
			if !e.swept[tid] {
				e.thread(int(tid))
			}
		}
		for tid := range byTid {
			if !e.swept[tid] {
				e.thread(int(tid))
			}
		}
		for _, tid := range e.sortedTids() {
			th := e.ths[tid]
			t, seen := totals[uint32(tid)]
			e.close(th, t, seen, byTid[uint32(tid)], woke[uint32(tid)], end, starts)
		}
		e.res.Threads = append(e.res.Threads, e.done...)
		sort.Slice(e.res.Threads, func(i, j int) bool { return e.res.Threads[i].Tid < e.res.Threads[j].Tid })
		return nil
	}
	// Listed after the maps were read: a tid in them that is not listed
	// has exited and will not be touched by the kernel again.
	live := map[uint32]bool{}
	if err := e.memberTasks(func(_, tid int) { live[uint32(tid)] = true }); err != nil && e.set == nil {
		return nil // exiting: the loop notices
	}
	dead := map[uint32]bool{}
	for tid := range totals {
		if !live[tid] {
			dead[tid] = true
		}
	}
	for tid := range byTid {
		if !live[tid] {
			dead[tid] = true
		}
	}
	for tid := range dead {
		if e.swept[tid] {
			// The exiting thread's last switch-out, recorded after it was
			// swept: no wait (it is dead), and its row is already done.
			e.dropSwept(tid, byTid[tid], woke[tid])
			continue
		}
		if e.unlisted(int(tid)) {
			continue
		}
		if t, seen := totals[tid]; seen && t.Exited == 0 && !e.dying[tid] && e.stopAt == 0 {
			// Gone from its process's list but, when the totals were
			// read, not done: a thread is unlisted before its last
			// switches. Folded once the kernel saw its final switch-out
			// (the next sweep, or after the detach): then every wait it
			// made is in the waits, read after the totals.
			if e.dying == nil {
				e.dying = map[uint32]bool{}
			}
			e.dying[tid] = true
			continue
		}
		delete(e.dying, tid)
		th := e.thread(int(tid))
		t, seen := totals[tid]
		th.acc.gone = true
		e.close(th, t, seen, byTid[tid], woke[tid], 0, nil)
		e.dropSwept(tid, byTid[tid], woke[tid])
		delete(e.ths, int(tid))
		e.bres.SweptThreads++
	}
	return nil
}

// readThreadMaps reads the waits, their wakers (--waker) and the
// threads' totals, by thread.
func (e *bpfEngine) readThreadMaps() (map[uint32][]waitEnt, map[uint32][]wokeEnt, map[uint32]schedbpf.Thr, error) {
	// The totals first: a thread they show exited (its final switch-out
	// seen) made every one of its waits before, so the waits read next
	// hold them all.
	totals := map[uint32]schedbpf.Thr{}
	if err := batchAll(e.tr.Threads, func(k uint32, v schedbpf.Thr) { totals[k] = v }); err != nil {
		return nil, nil, nil, fmt.Errorf("pid %d: read map threads: %w", e.s.Pid, err)
	}
	byTid := map[uint32][]waitEnt{}
	if err := batchAll(e.tr.Waits, func(k schedbpf.Wkey, v schedbpf.Wval) { byTid[k.Tid] = append(byTid[k.Tid], waitEnt{k, v}) }); err != nil {
		return nil, nil, nil, fmt.Errorf("pid %d: read map waits: %w", e.s.Pid, err)
	}
	woke := map[uint32][]wokeEnt{}
	if e.tr.Offwake != nil {
		if err := batchAll(e.tr.Offwake, func(k schedbpf.Okey, v schedbpf.Wval) { woke[k.Tid] = append(woke[k.Tid], wokeEnt{k, v}) }); err != nil {
			return nil, nil, nil, fmt.Errorf("pid %d: read map offwake: %w", e.s.Pid, err)
		}
	}
	return byTid, woke, totals, nil
}

// dropSwept deletes an exited thread's map entries and remembers it as
// swept, so that entries the kernel adds for it afterwards (its last
// switch) do not make it a second thread.
func (e *bpfEngine) dropSwept(tid uint32, waits []waitEnt, woke []wokeEnt) {
	for _, w := range waits {
		_ = e.tr.Waits.Delete(w.k)
	}
	if e.tr.Offwake != nil {
		for _, w := range woke {
			_ = e.tr.Offwake.Delete(w.k)
		}
	}
	_ = e.tr.Wakes.Delete(tid)
	_ = e.tr.Threads.Delete(tid)
	_ = e.tr.Starts.Delete(tid)
	if e.swept == nil {
		e.swept = map[uint32]bool{}
	}
	e.swept[tid] = true
}

func (e *bpfEngine) sortedTids() []int {
	out := make([]int, 0, len(e.ths))
	for tid := range e.ths {
		out = append(out, tid)
	}
	sort.Ints(out)
	return out
}

// close folds a thread's waits and totals into the profile and its
// ThreadStat; end > 0 closes what is still open at end.
func (e *bpfEngine) close(th *bthr, t schedbpf.Thr, seen bool, waits []waitEnt, woke []wokeEnt, end int64, starts map[uint32]schedbpf.Start) {
	a := &th.acc
	first, last := e.t0, end
	if seen {
		first = int64(t.First)
		// On CPU is the scheduler's run time: the intervals between a
		// switch-in and its switch-out less what the task did not run.
		a.onNS, a.offNS, a.rqNS = int64(t.OnNs-min(t.LostNs, t.OnNs)), int64(t.OffNs), int64(t.RqNs)
		e.bres.NotRunS += float64(t.LostNs) / 1e9
		a.switches = t.Outs
		switch {
		case t.Exited != 0:
			last, a.gone = int64(t.Exited), true
		case a.gone:
			// Swept as exited, its last switch-out unseen (the last thread
			// of a set's member: the process leaves the set before it):
			// it ran from its last switch-in to its exit.
			last = e.exitOf(th.tid, t)
			if t.OnSince != 0 {
				a.onNS += max(last-int64(t.OnSince), 0)
			}
		}
	}
	// The waits joined to a waker are also in waits: fold them with their
	// waker and the rest of each aggregate without.
	wokeOf := map[schedbpf.Wkey]schedbpf.Wval{}
	for _, o := range woke {
		k := o.k
		wk := schedbpf.Wkey{Uip: k.Uip, Tid: k.Tid, Kstack: k.Kstack, Sysnr: k.Sysnr, Flags: k.Flags, Pyid: k.Pyid, Pyk: k.Pyk}
		v := wokeOf[wk]
		v.Ns += o.v.Ns
		v.Count += o.v.Count
		wokeOf[wk] = v
		e.fold(th, wk, int64(o.v.Ns), o.v.Count, e.wakerFrames(k))
	}
	for _, w := range waits {
		if !seen {
			// No totals entry (the threads map was full): each wait ended
			// in a switch-in, which is the nearest count of its switches.
			a.switches += w.v.Count
		}
		ns, n := w.v.Ns, w.v.Count
		if v, ok := wokeOf[w.k]; ok {
			// More woken than in waits: the waits map was full for some.
			ns -= min(ns, v.Ns)
			n -= min(n, v.Count)
		}
		if n > 0 || ns > 0 {
			e.fold(th, w.k, int64(ns), n, nil)
		}
	}
	if end > 0 && !a.gone {
		switch {
		case seen && t.OnSince != 0:
			a.onNS += max(end-int64(t.OnSince), 0)
		case seen:
			if s, ok := starts[uint32(th.tid)]; ok {
				d := max(end-int64(s.Ts), 0)
				var id uint32
				_ = e.tr.Pyids.Lookup(schedbpf.Pkey{Tid: uint32(th.tid), Ts: s.Ts}, &id)
				if s.Flags&schedbpf.FlagRunQueue != 0 {
					a.rqNS += d
				} else {
					a.offNS += d
				}
				flags := s.Flags
				if d < e.minNS {
					flags |= schedbpf.FlagFiltered
				}
				e.fold(th, schedbpf.Wkey{Tid: uint32(th.tid), Kstack: s.Kstack, Uip: s.Uip, Sysnr: s.Sysnr, Flags: flags, Pyid: id, Pyk: s.Pyk}, d, 1, nil)
			}
		case th.state0 == "R" || th.state0 == "":
			a.onNS += max(end-e.t0, 0)
		default:
			// No event all window: off CPU throughout.
			d := max(end-e.t0, 0)
			a.offNS += d
			flags := uint32(schedbpf.FlagBefore)
			if d < e.minNS {
				flags |= schedbpf.FlagFiltered
			}
			e.fold(th, schedbpf.Wkey{Tid: uint32(th.tid), Kstack: -1, Sysnr: -1, Flags: flags, Pyid: th.pre}, d, 1, nil)
		}
	}
	if end > 0 && !a.gone && th.haveRun0 && th.haveRun1 {
		// The scheduler's own account of the thread's CPU time over the
		// window. Paired switch events have been seen to miss part of a
		// CPU-bound thread's run; where they disagree by more than 10 ms
		// (the two reads of schedstat lie a few ms off the window's ends),
		// the scheduler's figure stands and the difference is reported.
		if on := th.run1 - th.run0; on-a.onNS > 10e6 || a.onNS-on > 10e6 {
			e.bres.OnCPUFixed++
			e.bres.OnCPUFixedS += float64(on-a.onNS) / 1e9
			a.onNS = on
		}
	}
	if last == 0 {
		last = first // swept without an exit time: its entry was lost
	}
	root := func() []int {
		var ids []int
		if r := e.rootFrame(th.tid); r >= 0 {
			ids = append(ids, r)
		}
		if e.opt.Threads {
			ids = append(ids, e.threadFrame(th.tid))
		}
		return ids
	}
	if e.opt.Wall && a.onNS > 0 {
		e.prof.AddIDs(append(root(), e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[on-CPU]"})), a.onNS/1000)
	}
	st := ThreadStat{Tid: th.tid, Name: e.name(th.tid), WindowS: float64(max(last-first, 0)) / 1e9,
		OnCPUS: float64(a.onNS) / 1e9, OffCPUS: float64(a.offNS) / 1e9, RunQS: float64(a.rqNS) / 1e9,
		ShortN: a.shortN, ShortS: float64(a.shortNS) / 1e9, ClassS: map[string]float64{},
		Switches: a.switches, Exited: a.gone}
	if e.res.ClassS == nil {
		e.res.ClassS = map[string]float64{}
	}
	for c, ns := range a.classNS {
		st.ClassS[c] = float64(ns) / 1e9
		e.res.ClassS[c] += float64(ns) / 1e9
	}
	e.res.ShortN += a.shortN
	e.res.ShortS += st.ShortS
	e.done = append(e.done, st)
}

// unlisted says whether a thread missing from the members' task lists
// still lives in an observed process: a forked member whose join the set
// has not read yet is not listed, and sweeping its thread then would
// drop the rest of its life.
func (e *bpfEngine) unlisted(tid int) bool {
	st, err := e.opt.FS.Status(tid)
	if err != nil || strings.HasPrefix(st.State, "Z") || strings.HasPrefix(st.State, "X") {
		return false
	}
	if st.Tgid == e.s.Pid {
		return true
	}
	if e.set != nil && st.Tgid > 0 && e.set.set.Has(st.Tgid) {
		e.set.pidOf[tid] = st.Tgid
		return true
	}
	return false
}

// exitOf is when a thread that exited without a final switch-out seen
// did: its process's exit (the set's exit event), never before its last
// event; else its last event (a lower bound: the time it ran after its
// last switch-in is then unknown).
func (e *bpfEngine) exitOf(tid int, t schedbpf.Thr) int64 {
	last := max(int64(t.First+t.OnNs+t.OffNs+t.RqNs), int64(t.OnSince), int64(t.First))
	if e.set == nil {
		return last
	}
	m, ok := e.set.set.Member(e.pidOfTid(tid))
	if !ok || !m.Exited {
		m, ok = e.set.set.Member(tid) // a process's leader: tid is its pid
	}
	if ok && m.Exited && int64(m.ExitedAt) >= last {
		last = int64(m.ExitedAt)
	}
	if e.stopAt > 0 && last > e.stopAt {
		// It exited after the window: observed until its end.
		last = max(e.stopAt, int64(t.OnSince))
	}
	return last
}

// fold adds one aggregate (count waits, ns long in all) to the profile
// and to the thread's classes; tail (the waker) goes after the class.
func (e *bpfEngine) fold(th *bthr, k schedbpf.Wkey, ns int64, count uint64, tail []int) {
	a := &th.acc
	var rec *pyRec
	if k.Pyid > 0 && int(k.Pyid) <= len(e.recs) {
		rec = &e.recs[k.Pyid-1]
	}
	ks := e.kernelStack(k.Kstack)
	class := e.classOf(k, ks.names, rec)
	if class != "" {
		a.classNS[class] += ns
	}
	kernelPy := k.Pyk != 0 && e.kp != nil
	prePy := rec == nil && !kernelPy && k.Flags&schedbpf.FlagPrePy != 0
	switch {
	case prePy:
		e.bres.BeforePythonN += count
		e.bres.BeforePythonS += float64(ns) / 1e9
	case rec == nil && !kernelPy:
		a.shortN += count
		a.shortNS += ns
	}
	if k.Flags&schedbpf.FlagFiltered != 0 {
		e.res.FilteredN += count
		e.res.FilteredS += float64(ns) / 1e9
		return
	}
	ids := e.scratch[:0]
	if r := e.rootFrame(th.tid); r >= 0 {
		ids = append(ids, r)
	}
	if kernelPy {
		ids = e.kernelStackIDs(ids, th, k.Pyk, count)
	} else if rec != nil {
		ids = append(ids, rec.ids...)
	} else {
		if e.opt.Threads {
			ids = append(ids, e.threadFrame(th.tid))
		}
		what := "[short waits: not read]"
		if prePy {
			what = "[before the interpreter]"
		}
		ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: what}))
	}
	if k.Uip != 0 {
		ids = append(ids, e.userFrame(k.Uip))
	}
	if len(ks.ids) > 0 {
		ids = append(ids, ks.ids...)
	} else if rec != nil {
		ids = append(ids, rec.kern...)
	}
	if class == "" {
		class = "not read"
	}
	ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[" + class + "]"}))
	ids = append(ids, tail...)
	e.prof.AddIDs(ids, ns/1000)
	e.scratch = ids
}

// wakerFrames: the [woken by] frame, then the waker's kernel stack (root
// first) — where it was when it woke the thread (a lock release, a timer
// interrupt, a pipe write).
func (e *bpfEngine) wakerFrames(k schedbpf.Okey) []int {
	var b []byte
	for _, c := range k.Comm {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	comm := output.Printable(string(b)) // any process's name: its own to choose
	var who string
	switch {
	case int(k.Wtgid) == e.s.Pid:
		if n := e.name(int(k.Wtid)); n != "" {
			comm = n
		}
		who = fmt.Sprintf("%s (%d, this process)", comm, k.Wtid)
	case k.Wtid == 0:
		who = fmt.Sprintf("%s (0: an interrupt on an idle CPU)", comm)
	default:
		who = fmt.Sprintf("%s (%d, pid %d)", comm, k.Wtid, k.Wtgid)
	}
	ks := e.wholeStack(k.Wkstack)
	// sched_waking runs in whatever context woke the thread: in an
	// interrupt, current is the task it interrupted, which woke nobody.
	if k.Wkstack < 0 && k.Wtid != 0 {
		// Its stack not taken (the stack map's bucket held another):
		// the task or an interrupt it ran — not told apart, not guessed.
		who = WakerUnknown + "while " + who + " ran"
	} else if kind := interruptOf(ks.names); kind != "" {
		ran := who
		if k.Wtid == 0 {
			ran = ""
		}
		who = interruptLabel(kind, ran)
	}
	ids := []int{e.prof.Intern(flame.Frame{Kind: flame.State, Function: WokenBy + who})}
	return append(ids, ks.ids...)
}

// classOf names the wait class: from the kernel's hints (syscall and GIL
// bit at the switch-out, state, kernel stack) through Classify, the
// rules the perf engine applies to procfs; from the procfs read when the
// kernel had no hints; "" when nobody knows.
func (e *bpfEngine) classOf(k schedbpf.Wkey, knames []string, rec *pyRec) string {
	if k.Flags&schedbpf.FlagRunQueue != 0 {
		return ClassRunQueue
	}
	if k.Flags&schedbpf.FlagStopped != 0 {
		return ClassStopped // prev_state: __TASK_STOPPED or __TASK_TRACED
	}
	if rec != nil && rec.class != "" && k.Flags&schedbpf.FlagRegs == 0 {
		return rec.class
	}
	if k.Flags&schedbpf.FlagBefore != 0 {
		return "" // not read: nothing about it is known
	}
	w := WaitInfo{State: "S"}
	if k.Flags&schedbpf.FlagD != 0 {
		w.State = "D"
	}
	if k.Flags&schedbpf.FlagRegs != 0 && k.Sysnr >= 0 {
		w.Syscall = procfs.SyscallName(int(k.Sysnr))
		arg := ^uint64(0)
		if k.Flags&schedbpf.FlagGIL != 0 {
			arg = e.gilLo
		}
		w.Args = []uint64{arg}
		w.NoFds = k.Flags&schedbpf.FlagNoFds != 0
	}
	for _, n := range knames {
		switch {
		case stopFrame(n):
			w.Wchan = n
		case w.Syscall == "" && (strings.HasPrefix(n, "__x64_sys_") || strings.HasPrefix(n, "__ia32_sys_")):
			w.Syscall = n[strings.Index(n, "_sys_")+5:]
		case strings.HasSuffix(n, "pipe_read"):
			w.FdLink = "pipe:"
		case w.FdLink == "" && (strings.HasPrefix(n, "sock_") || strings.HasPrefix(n, "tcp_") || strings.HasPrefix(n, "unix_") ||
			strings.HasPrefix(n, "udp_") || strings.HasPrefix(n, "inet_")):
			w.FdLink = "socket:"
		case strings.Contains(n, "io_schedule") || strings.Contains(n, "folio_wait"):
			w.Wchan = n
		case w.FdLink == "" && (n == "filemap_read" || strings.HasPrefix(n, "ext4_") || strings.HasPrefix(n, "xfs_")):
			w.FdLink = "/"
		}
	}
	if w.Syscall == "" && len(knames) == 0 {
		return ""
	}
	return Classify(w, e.gilLo, e.gilHi)
}

// kernelStack names a kernel stack id's frames, root first, without the
// scheduler's own frames (from __schedule inwards: every wait has them).
func (e *bpfEngine) kernelStack(id int32) kstack {
	ks := e.wholeStack(id)
	return kstack{ids: ks.ids[:ks.keep], names: ks.names[:ks.keep], keep: ks.keep}
}

// wholeStack is kernelStack with every frame: a waker's stack, where what
// runs inside __schedule (an interrupt taken as a switch finishes) is
// where the wake-up was made.
func (e *bpfEngine) wholeStack(id int32) kstack {
	if id < 0 {
		return kstack{}
	}
	if ks, ok := e.kcache[id]; ok {
		return ks
	}
	var ks kstack
	addrs, err := schedbpf.Stack(e.tr.Kstacks, id)
	if err == nil {
		ks.keep = len(addrs)
		for i := len(addrs) - 1; i >= 0; i-- {
			n := e.ksym(addrs[i])
			if n == "__schedule" && ks.keep == len(addrs) {
				ks.keep = len(ks.names)
			}
			ks.names = append(ks.names, n)
			ks.ids = append(ks.ids, e.prof.Intern(flame.Frame{Kind: flame.Kernel, Function: n, Addr: addrs[i]}))
		}
	}
	e.kcache[id] = ks
	return ks
}

func (e *bpfEngine) ksym(a uint64) string {
	if e.ksyms == nil {
		var err error
		e.ksyms, err = procfs.Default().Kallsyms()
		var ke *procfs.KallsymsError
		switch {
		case errors.As(err, &ke) && !ke.Parse:
			e.bres.KernelSymbols = ke.Error()
		case err == nil && e.ksyms.Hidden:
			e.bres.KernelSymbols = "kernel addresses hidden (kernel.kptr_restrict): kernel frames unnamed"
		}
	}
	if n, ok := e.ksyms.Lookup(a); ok {
		return n
	}
	return fmt.Sprintf("0x%x", a)
}

// userFrame names the user instruction a thread blocked at (the return
// address of its syscall, in the libc wrapper). Deeper native frames would
// need an unwind the kernel cannot do here: CPython is built without frame
// pointers, so the kernel's frame-pointer walk is only exact at its start.
func (e *bpfEngine) userFrame(ip uint64) int {
	if id, ok := e.ucache[ip]; ok {
		return id
	}
	if e.uproc == nil {
		e.uproc = unwind.NewProcess(e.s.Pid, unwind.NewCache())
	}
	id := e.prof.Intern(flame.Frame{Kind: flame.Native, Function: e.uproc.Symbolize(ip - 1).Label(), Addr: ip})
	e.ucache[ip] = id
	return id
}

// procKernelStack reads the thread's kernel stack (task/TID/stack, root
// only): the kernel stack of a wait that began before the attach.
func (e *bpfEngine) procKernelStack(pid, tid int) []int {
	names, err := e.opt.FS.TaskStack(pid, tid)
	if err != nil {
		return nil
	}
	cut := -1
	for i, n := range names {
		if n == "__schedule" {
			cut = i
		}
	}
	var ids []int
	for i := len(names) - 1; i > cut; i-- {
		ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.Kernel, Function: names[i]}))
	}
	return ids
}

func (e *bpfEngine) counters() {
	c, err := e.tr.ReadCounters()
	if err != nil {
		return
	}
	b := &e.bres
	b.SchedSwitches, b.TargetOut, b.TargetIn, b.PythonJoined = c[schedbpf.CSwitches], c[schedbpf.COut], c[schedbpf.CIn], c[schedbpf.CPyidHit]
	if e.res.WindowS > 0 {
		b.SchedSwitchRate = float64(b.SchedSwitches) / e.res.WindowS
	}
	b.Drops = BPFDrops{StartMapFull: c[schedbpf.CDropStart], WaitsMapFull: c[schedbpf.CDropWaits],
		WaitsMapFullS: float64(c[schedbpf.CDropWaitsNS]) / 1e9, ThreadsMapFull: c[schedbpf.CDropThreads],
		KernelStackErr: c[schedbpf.CKstackErr], KernelReused: c[schedbpf.CKstackReused], Unpaired: c[schedbpf.CUnpaired],
		PyidMapFull: e.pyidErr, WakesMapFull: c[schedbpf.CDropWakes], OffwakeMapFull: c[schedbpf.CDropOffwake]}
	if e.opt.Waker {
		b.Wakes, b.WakeJoined = c[schedbpf.CWakes], c[schedbpf.CWakeJoined]
	}
	b.Woken, b.WokenS = c[schedbpf.CWoken], float64(c[schedbpf.CWokenNS])/1e9
	if rt, n, err := e.tr.RunStats(); err == nil && n > 0 {
		b.BPFRuns, b.BPFCPUS, b.BPFNSPerRun = n, rt.Seconds(), float64(rt.Nanoseconds())/float64(n)
	}
	if e.kp != nil {
		e.closeKernelWalk(c)
		b.KernelWalk = &e.kp.acct
	}
	// A context switch is one event: a switch-out, later its switch-in.
	// Counting both would double it (and exceed the machine's own count).
	e.res.Switches = b.TargetOut
	// Waits lost to the profile and the thread totals alike.
	e.res.Lost = b.Drops.StartMapFull + b.Drops.ThreadsMapFull
}

func (e *bpfEngine) mapUse() {
	for _, m := range []struct {
		n string
		m *ebpf.Map
	}{{"starts", e.tr.Starts}, {"waits", e.tr.Waits}, {"threads", e.tr.Threads}, {"pyids", e.tr.Pyids}, {"wakes", e.tr.Wakes}, {"offwake", e.tr.Offwake}} {
		if m.m == nil {
			continue // no --waker
		}
		e.bres.Maps = append(e.bres.Maps, BPFMapUse{Name: m.n, Entries: schedbpf.Entries(m.m), Max: m.m.MaxEntries()})
	}
}

// batchAll calls fn on every entry of a hash map, in batches where the
// kernel has them.
func batchAll[K, V any](m *ebpf.Map, fn func(K, V)) error {
	keys, vals := make([]K, 256), make([]V, 256)
	var cur ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cur, keys, vals, nil)
		for i := range n {
			fn(keys[i], vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			var k K
			var v V
			it := m.Iterate()
			for it.Next(&k, &v) {
				fn(k, v)
			}
			return it.Err()
		case err != nil:
			return err
		}
	}
}

// schedRun reads the scheduler's run time of every listed thread of the
// target (cheap: one small procfs read each) and hands it to set.
func (e *bpfEngine) schedRun(set func(*bthr, int64)) {
	_ = e.memberTasks(func(pid, tid int) {
		if v, ok := schedRunTime(pid, tid); ok {
			set(e.thread(tid), v)
		}
	})
}
