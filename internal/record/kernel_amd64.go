//go:build amd64

package record

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/mixed"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/unwind"
)

// kernelRec is cpu mode's bpf engine: internal/kwalk walks each sample's
// Python stack in the kernel, at the sample; user space symbolizes.
type kernelRec struct {
	w     *kwalk.Walker
	sym   *kwalk.Symbolizer
	ids   map[[2]uint64]int // (code object as read, lasti) -> interned frame
	stats io.Closer         // the run's BPF_ENABLE_STATS, nil if not ours
	note  string            // Meta.BPFStats
	set   *setRec           // observing a set of processes, nil for one

	exact, trunc, fault, invalid, nopy, empty, prepy uint64
	partly                                           uint64 // samples named but for some frames' code objects

	// Aggregated in the kernel (kwalk.Options.Aggregate): each distinct
	// stack as the ring brought it, counts whose stack had not come yet
	// (read at the next drain), and samples whose stack never came.
	defs    map[uint64]kdef
	frames  []kwalk.Frame // the defs' frames, one after another
	fids    []int         // the defs' interned Python frames, one after another
	orphans []kwalk.Count
	unsent  uint64
	mapOnly bool      // no TLS offset: thread states from the tid map alone
	now     time.Time // this drain's clock
	// early: a program observed is starting; its new stacks' code objects
	// are read as they come (each wakes the reader: Walker.SetUrgent), not
	// at the next drain: an import's are freed as it ends, a short-lived
	// program's with it.
	early bool

	// --kernel: each kernel stack's frames, root first, by the kernel's id.
	kstacks             map[uint32][]int
	kstackN, kstackLost uint64

	// --native: samples whose native stack was unwound but whose Python
	// stack had not come through the ring yet (folded at the next drain).
	natOrphans []natOrphan
}

// natOrphan is a native sample waiting for its stack's definition.
type natOrphan struct {
	c      kwalk.Count
	pcs    []uint64
	sps    []uint64
	links  []uint64
	status unwind.Status
}

// kdef is one distinct stack as the ring brought it, and (one process)
// its Python frames interned once: a stack counted again is folded
// without naming its code objects again. The names are reused while the
// symbolizer would trust them (3.12+: the id holds the code-object
// generation; without one: for Revalidate after they were read).
//
// A long recording holds hundreds of thousands of them: the value is
// pointer-free (its frames and ids are offsets into two arenas), so the
// collector never scans the map.
type kdef struct {
	gen    uint64
	named  int64  // when fids were interned (k.now, Unix ns); 0: not yet
	frame  uint32 // its frames: k.frames[frame : frame+n], innermost first
	fid    uint32 // its Python frames' ids: k.fids[fid : fid+n], root first
	n      uint32
	hops   uint32 // frames the walk visited, shims included (Sample.Marker)
	hasFid bool
}

// heldWalker is the walker loaded for a held command before its release.
type heldWalker = kwalk.Walker

// walkOptions are the walker's options for this recording; TLS and the
// layout come from the target's interpreter.
func walkOptions(s *session.Session, o Options) kwalk.Options {
	// Counted in the kernel: user space pays per distinct stack and per
	// drain, not per sample.
	wo := kwalk.Options{Freq: o.Freq, Latency: lookOf(o), Aggregate: true, KernelStacks: o.Kernel}
	if o.Native {
		// Each sample also copies the thread's registers and user stack,
		// unwound here: the native frames of the same instant as the
		// Python ones.
		wo.NativeBytes = o.StackSize
	}
	if s.Set.Many() && !o.Native {
		so := s.Options()
		wo.Set = &so
	}
	return wo
}

// openHeld loads the walker for a held command (kwalk.Options.Late) and
// starts it on every CPU: the command is sampled from its exec. Its layout
// is the one its files name when they can be read (the load then takes a
// fraction of a second), none otherwise. nil when the kernel refused it
// (openKernel then tries again, and the fallback says why).
func openHeld(s *session.Session, opt Options) (*heldWalker, string) {
	wo := walkOptions(s, opt)
	wo.Late = true
	kl, path, err := s.HeldLayout()
	from := kwalk.LayoutRead(path)
	if err != nil {
		// Not Python by its files (a shell script, a wrapper): the layout
		// comes with its interpreter.
		kl, from = nil, kwalk.LayoutOnceUp("the command's files: "+err.Error())
	}
	w, err := kwalk.Open(s.Pid, kl, wo)
	if err != nil && kl != nil {
		from = kwalk.LayoutOnceUp("loaded with the layout read from " + path + ": " + err.Error())
		w, err = kwalk.Open(s.Pid, nil, wo)
	}
	if err != nil {
		return nil, ""
	}
	return w, from
}

// configureHeld gives the held command's walker its interpreter's layout,
// each new stack waking the reader while the program starts.
func configureHeld(w *heldWalker, s *session.Session) error {
	kl, err := s.Py.KernelLayout()
	if err != nil {
		return err
	}
	tls, err := s.Py.TLSOffsets()
	if err != nil {
		tls = nil // threads are then found through the map user space fills
	}
	if err := w.Configure(kl, tls); err != nil {
		return err
	}
	return w.SetUrgent(true)
}

func (h *heldStart) close() {
	if h != nil && h.w != nil {
		h.w.Close()
		h.w = nil
	}
}

// openKernel loads the walker for the session's target and starts it on
// every CPU (or configures the one a held command's start loaded). Any
// error means the walker is not in use (nothing attached).
func (r *Recorder) openKernel() (*kernelRec, error) {
	kl, err := r.s.Py.KernelLayout()
	if err != nil {
		return nil, err
	}
	tls, err := r.s.Py.TLSOffsets()
	if err != nil {
		tls = nil // threads are then found through the map user space fills
	}
	k := &kernelRec{ids: map[[2]uint64]int{}, mapOnly: len(tls) == 0}
	k.stats, k.note = bpfload.EnableRunStats()
	wo := walkOptions(r.s, r.opt)
	wo.TLS = tls
	if r.opt.Kernel {
		k.kstacks = map[uint32][]int{}
	}
	if r.opt.Native {
		r.nat.interpBin = r.s.Py.Info.Binary
		r.nat.instant = true
	}
	k.defs = map[uint64]kdef{}
	if h := r.held; h != nil && h.w != nil {
		k.w, h.w, h.taken = h.w, nil, true // configured by startHeld
	} else {
		k.w, err = kwalk.Open(r.s.Pid, kl, wo)
	}
	if err != nil {
		k.close()
		return nil, err
	}
	r.tids.Refresh()
	if err := k.w.SetThreads(r.tids.All()); err != nil {
		k.close()
		return nil, err
	}
	k.sym = kwalk.NewSymbolizer(r.s.Py, kl)
	k.sym.P = r.s.GuardCode(k.sym.P) // -p PID: no name read from a program it exec'd
	k.w.Known = func(id uint64) bool { _, ok := k.defs[id]; return ok }
	if k.w.Set != nil {
		k.set = newSetRec(k, r, kl)
		r.setRate = k.set.rateWindow
	}
	return k, nil
}

// tick reads the clock once for a batch of samples: the symbolizers'
// re-validation and the defs' reuse go by it.
func (k *kernelRec) tick(now time.Time) {
	k.now = now
	k.sym.Tick(now)
	if k.set != nil {
		k.set.tick(now)
	}
}

// gone says whether the process that sent a sample has exited (its code
// objects can no longer be read: no frame of it is named after).
func (k *kernelRec) gone(r *Recorder, tgid int) bool {
	if k.set != nil {
		return k.set.gone(tgid)
	}
	return !r.s.Alive()
}

// starting says whether a program observed began a moment ago (the held
// command, a member just forked or exec'd): its stacks are named every
// pendingLook while it starts, so that a short-lived one's are read
// before it exits (after, its code objects are gone: [unreadable:
// process exited]).
func (k *kernelRec) starting(r *Recorder) bool {
	if k.set == nil {
		st := r.s.Started()
		return !st.IsZero() && time.Since(st) < procset.StartGrace
	}
	for _, m := range k.set.set.Members() {
		if !m.Exited && (k.set.set.Starting(m.Pid) || (m.Pid == r.s.Pid && time.Since(r.s.Started()) < procset.StartGrace)) {
			return true
		}
	}
	return false
}

func (k *kernelRec) close() {
	if k.w != nil {
		k.w.Close()
	}
	if k.stats != nil {
		k.stats.Close()
		k.stats = nil
	}
}

// runKernel folds the walker's samples until the recording ends, then
// reads what is left in the ring and the kernel's account.
func (r *Recorder) runKernel(ctx context.Context, deadline <-chan time.Time, k *kernelRec) error {
	defer k.close()
	lastCheck := time.Now()
	read := func(until time.Time) error {
		// --threads: the names are read between the ring's reads, as often
		// as threads come and go.
		wake := func() {
			if r.namer != nil && r.namer.Next().Before(until) {
				k.w.SetDeadline(r.namer.Next())
			} else {
				k.w.SetDeadline(until)
			}
		}
		wake()
		for {
			s, err := k.w.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				now := time.Now()
				r.lookNames(now)
				if r.namer == nil || !now.Before(until) {
					return nil
				}
				wake()
				continue
			}
			if err != nil {
				return err
			}
			// The ring brings each distinct stack once (the counts come
			// from DrainCounts).
			if s.ID != 0 {
				k.defs[s.ID] = kdef{gen: s.CodeGen, frame: uint32(len(k.frames)), n: uint32(len(s.Frames)), hops: uint32(s.Hops)}
				k.frames = append(k.frames, s.Frames...)
				if k.early {
					k.warm(&s)
				}
			}
		}
	}
	drain := func(final bool) error {
		k.tick(time.Now())
		if r.opt.Native {
			return r.drainNative(k, final)
		}
		pend := k.orphans
		k.orphans = nil
		err := k.w.DrainCounts(func(c kwalk.Count) { pend = append(pend, c) })
		for _, c := range pend {
			r.foldCount(k, c, final)
		}
		return err
	}
	var err error
	for !r.stopped(ctx, deadline) {
		// Each look at the ring is a wake-up (a VM exit here): every
		// 200 ms, or at the end of the recording, or when the kernel says
		// a sixteenth of the ring is waiting.
		look := r.look()
		k.early = (k.set != nil && k.set.openPending()) || k.starting(r)
		_ = k.w.SetUrgent(k.early) // without it, its stacks are named at the drain
		if k.early {
			look = min(look, pendingLook)
		}
		until := time.Now().Add(look)
		if r.opt.Duration > 0 {
			if end := r.start.Add(r.opt.Duration); end.Before(until) {
				until = end
			}
		}
		if err = read(until); err != nil {
			break
		}
		if r.sawExec() {
			break // the final drain names what it can from before the exec
		}
		if err = drain(false); err != nil {
			break
		}
		if time.Since(lastCheck) >= r.look() {
			lastCheck = time.Now()
			// The map serves threads the kernel can't find through their
			// TLS (3.10 without it, other layouts); TLS finds new ones.
			r.tids.Refresh()
			refs := r.tids.All()
			if k.set != nil {
				refs = k.set.threadRefs(refs, r.s.Pid)
			}
			_ = k.w.SetThreads(refs)
			r.achieved()
			if !r.s.Alive() {
				r.targetEnded = true
				break
			}
			r.progress()
		}
	}
	k.w.Stop()
	if e := read(time.Now()); err == nil {
		err = e
	}
	if e := drain(true); err == nil {
		err = e
	}
	r.kernelAccount(k)
	if k.set != nil {
		r.achieved() // the members' last CPU readings, before the set closes
		k.w.Set.Close()
		r.setAcct = k.set.account()
	}
	return err
}

// drainNative folds the samples that came with their native stack copy:
// each unwound now (the copy lives in its ring record), then folded with
// its Python stack — kept for the next drain when that has not come yet.
func (r *Recorder) drainNative(k *kernelRec, final bool) error {
	pend := k.natOrphans
	k.natOrphans = nil
	for _, o := range pend {
		r.nat.slab, r.nat.sps = append(r.nat.slab[:0], o.pcs...), append(r.nat.sps[:0], o.sps...)
		r.foldNative(k, o.c, nativeSample{n: len(o.pcs), koff: len(o.pcs), status: o.status}, o.links, final)
	}
	_, err := k.w.ReadNative(func(s *kwalk.NativeSample) {
		ns := r.nat.captureCopy(s.Head.Regs(), s.Head.Stack(s.Stack))
		r.foldNative(k, s.Count, ns, s.Links, final)
	})
	return err
}

// foldNative folds one sample with its unwound native stack (in the
// slab) and its runs' links, or keeps it while its Python stack has not
// come.
func (r *Recorder) foldNative(k *kernelRec, c kwalk.Count, ns nativeSample, links []uint64, final bool) {
	if _, ok := k.defs[c.ID]; c.ID != 0 && !ok && !final {
		k.natOrphans = append(k.natOrphans, natOrphan{c: c, pcs: append([]uint64(nil), r.nat.slab[:ns.n]...),
			sps: append([]uint64(nil), r.nat.sps[:ns.n]...), links: append([]uint64(nil), links...), status: ns.status})
		return
	}
	r.natCur, r.natLinks = &ns, links
	r.foldCount(k, c, final)
	r.natCur, r.natLinks = nil, nil
}

// kernelSample folds n samples of one stack (counted in the kernel; def:
// its definition, nil for a count without frames): the stack walked at the sample when the
// walk was complete; the frames read under [truncated stack] or [callers
// missing] (Sample.Marker) when callers are missing; a marker when
// nothing usable was read.
func (r *Recorder) kernelSample(k *kernelRec, s *kwalk.Sample, n uint64, def *kdef) {
	w := int64(n)
	sym, ids := k.sym, k.ids
	if r.execed != nil && k.set == nil && (s.Flags&(kwalk.FlagFault|kwalk.FlagInvalid|kwalk.FlagNoPython|kwalk.FlagEmpty) != 0 || len(s.Frames) == 0) {
		// Seen after the exec: a walk that found nothing usable may be of
		// the new program (the old one's addresses read in its memory).
		r.lostToExec(s.Tid, w)
		return
	}
	if k.set != nil {
		// Rooted at its process; read through that process's own reader.
		p, m := k.set.proc(s.Tgid)
		p.samples += n
		r.procRoot, r.hasRoot, r.tgid = k.set.rootFrame(r, p), true, s.Tgid
		defer func() { r.hasRoot, r.tgid = false, 0 }()
		switch {
		case m.Sym == nil && m.Gone:
			k.set.unread += n
			r.failed += n
			r.marker(s.Tid, "[unreadable: process exited]", w)
			return
		case m.Sym == nil:
			r.marker(s.Tid, "[refused: "+m.Why()+"]", w)
			return
		}
		sym, ids = m.Sym, p.ids
	}
	switch {
	case s.Flags&kwalk.FlagBeforePython != 0:
		k.prepy += n
		r.marker(s.Tid, "[before the interpreter]", w)
		return
	case s.Flags&kwalk.FlagNoPython != 0:
		k.nopy += n
		r.marker(s.Tid, "[no Python thread state]", w)
		return
	case s.Flags&kwalk.FlagEmpty != 0:
		k.empty += n
		r.marker(s.Tid, "[no Python frames]", w)
		return
	case s.Flags&kwalk.FlagFault != 0:
		k.fault += n
		r.marker(s.Tid, "[faulted: page not present]", w)
		return
	case s.Flags&kwalk.FlagInvalid != 0:
		k.invalid += n
		r.marker(s.Tid, "[invalid frame chain]", w)
		return
	}
	if len(s.Frames) == 0 {
		k.empty += n // e.g. 3.15's base frame alone: a thread starting or ending
		r.marker(s.Tid, "[no Python frames]", w)
		return
	}
	fids := r.rootIDs()
	if r.opt.Threads {
		fids = append(fids, r.threadFrame(s.Tid))
	}
	if s.Complete() {
		k.exact += n
	} else {
		k.trunc += n
		fids = append(fids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: s.Marker()}))
	}
	if def != nil && def.hasFid && k.set == nil && k.fresh(def) && r.natCur == nil {
		r.samples += n
		fids = append(append(fids, k.fids[def.fid:def.fid+def.n]...), r.kern...)
		r.prof.AddIDsN(fids, w, w)
		r.ids = fids
		return
	}
	py := len(fids)
	unread := 0
	for i := len(s.Frames) - 1; i >= 0; i-- {
		f := s.Frames[i]
		cs, err := sym.Code(f.Code, s.CodeGen)
		if session.IsExeced(err) {
			r.execed = err
			r.ids = fids[:py]
			r.lostToExec(s.Tid, w)
			return
		}
		if err != nil && k.gone(r, s.Tgid) {
			r.failed += n
			r.ids = fids[:py]
			if k.set != nil {
				k.set.unread += n
			}
			r.marker(s.Tid, "[unreadable: process exited]", w)
			return
		}
		if err != nil {
			// Freed since the sample (a module's code after its import
			// ran): this frame is marked, its callers and callees named.
			unread++
			fids = append(fids, r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[code object unreadable]"}))
			continue
		}
		key := [2]uint64{cs.ID, uint64(uint32(f.Lasti))}
		id, ok := ids[key]
		if !ok {
			id = r.prof.Intern(flame.Frame{Kind: flame.Python, Function: cs.Function, File: cs.File, Line: cs.Line(int(f.Lasti))})
			ids[key] = id
		}
		fids = append(fids, id)
	}
	switch {
	case unread == len(s.Frames):
		r.failed += n
		r.ids = fids[:py]
		r.marker(s.Tid, "[unreadable]", w)
		return
	case unread > 0:
		k.partly += n
		def = nil // not kept for the stack's next samples: read again
	}
	if def != nil && k.set == nil && uint32(len(fids)-py) == def.n {
		if !def.hasFid {
			def.fid, def.hasFid = uint32(len(k.fids)), true
			k.fids = append(k.fids, fids[py:]...)
		} else {
			copy(k.fids[def.fid:def.fid+def.n], fids[py:]) // named again: same frames, same room
		}
		def.named = k.now.UnixNano()
	}
	if r.natCur != nil {
		// --native: the native stack of the same sample, each eval-loop
		// frame replaced by the Python frames it runs — glued by the
		// runs' C-stack links (3.12+), else by counting the walk's entry
		// frames.
		pyf := r.nat.py[:0]
		entries := 0
		for i, f := range s.Frames { // innermost first
			p := mixed.Python{ID: fids[len(fids)-1-i], Entry: f.Flags&kwalk.FrameEntry != 0}
			if p.Entry {
				if entries < len(r.natLinks) {
					p.Link = r.natLinks[entries]
				}
				entries++
			}
			pyf = append(pyf, p)
		}
		r.nat.py = pyf
		fids = r.nat.stack(r.prof, fids[:py], *r.natCur, pyf, -1)
	}
	fids = append(fids, r.kern...)
	r.samples += n
	r.prof.AddIDsN(fids, w, w)
	r.ids = fids
}

// warm reads the code objects of a stack that just came into its
// process's symbolizer's cache, while the process lives: the drain names
// the stack from there, even after the process exited.
func (k *kernelRec) warm(s *kwalk.Sample) {
	sym := k.sym
	if k.set != nil {
		_, m := k.set.proc(s.Tgid)
		sym = m.Sym
	}
	if sym == nil {
		return
	}
	for _, f := range s.Frames {
		_, _ = sym.Code(f.Code, s.CodeGen)
	}
}

// fresh: def's interned frames may stand for its code objects now.
func (k *kernelRec) fresh(def *kdef) bool {
	if k.sym.Generations() && def.gen != 0 {
		return true // the stack's id holds the code-object generation
	}
	return k.now.UnixNano()-def.named < int64(k.sym.Revalidate)
}

// look is the bpf engine's look period (Options.Look): by default 200 ms,
// longer above 4 kHz (up to 1 s at 20 kHz). A look's price is mostly
// fixed (the thread map, the CPU readings, the drain's syscalls) and a
// fast sampler's counts repeat within a second: at 20 kHz, looks every
// 200 ms cost 0.60 µs of pyobs's CPU per sample, every second 0.10-0.17
// µs (steady state, BENCHMARKS.md). New stacks are still read as soon as
// the ring's wake mark is reached, and the counts maps (65,536 entries
// each) hold a second's distinct stacks.
func (r *Recorder) look() time.Duration { return lookOf(r.opt) }

func lookOf(o Options) time.Duration {
	if o.Look > 0 {
		return o.Look
	}
	if o.Native {
		// Each sample carries its stack copy (up to 16 KiB): the ring is
		// emptied at least ten times a second.
		return min(lookFor(o.Freq), 100*time.Millisecond)
	}
	return lookFor(o.Freq)
}

func lookFor(freq int) time.Duration {
	const base, perHz = 200 * time.Millisecond, 4000
	if freq <= perHz {
		return base
	}
	return min(time.Duration(freq)*base/perHz, time.Second)
}

// foldCount folds one of the kernel's counts under its stack; a count
// whose stack has not come through the ring yet waits for the next drain
// (final: it never came, its samples are lost and counted).
func (r *Recorder) foldCount(k *kernelRec, c kwalk.Count, final bool) {
	s := kwalk.Sample{Tid: c.Tid, Tgid: c.Tgid, Flags: c.Flags}
	var def kdef
	if c.ID != 0 {
		var ok bool
		if def, ok = k.defs[c.ID]; !ok {
			if final {
				k.unsent += c.N
			} else {
				k.orphans = append(k.orphans, c)
			}
			return
		}
		s.ID, s.Frames, s.CodeGen, s.Hops = c.ID, k.frames[def.frame:def.frame+def.n], def.gen, int(def.hops)
	}
	if k.kstacks != nil && c.KStack != 0 {
		r.kern = r.kernelFrames(k, c.KStack, c.N)
		defer func() { r.kern = nil }()
	}
	if c.ID == 0 {
		r.kernelSample(k, &s, c.N, nil)
		return
	}
	before := def
	r.kernelSample(k, &s, c.N, &def)
	if def != before {
		k.defs[c.ID] = def
	}
}

// kernelFrames is kernel stack ks's frames, root first (the syscall
// entry, down to where the sample hit), named once per stack; n samples
// are counted against it.
func (r *Recorder) kernelFrames(k *kernelRec, ks uint32, n uint64) []int {
	if ks == kwalk.KStackLost {
		k.kstackLost += n
	} else {
		k.kstackN += n
	}
	if ids, ok := k.kstacks[ks]; ok {
		return ids
	}
	if ks == kwalk.KStackLost {
		ids := []int{r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[kernel stack lost]"})}
		k.kstacks[ks] = ids
		return ids
	}
	pcs, err := k.w.KernelStack(ks)
	var ids []int
	if err != nil || len(pcs) == 0 {
		ids = []int{r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[kernel stack unreadable]"})}
	} else {
		for i := len(pcs) - 1; i >= 0; i-- {
			ids = append(ids, r.nat.kernelFrame(r.prof, pcs[i]))
		}
	}
	k.kstacks[ks] = ids
	return ids
}

// kernelAccount copies the walker's counts into the profile's account.
func (r *Recorder) kernelAccount(k *kernelRec) {
	m := &r.prof.Meta
	m.Exact, m.KernelTruncated, m.KernelFaulted, m.KernelInvalid = k.exact, k.trunc, k.fault, k.invalid
	m.PartlyNamed = k.partly
	if k.sym != nil {
		m.NamesByAge = k.sym.ByAge()
	}
	m.NotPython, m.NoFrames, m.BeforePython = k.nopy, k.empty, k.prepy
	m.BPFStats = k.note
	m.MapOnly = k.mapOnly
	if k.kstacks != nil {
		x := m.MixedMeta()
		x.KernelStacks, x.KernelStacksLost = k.kstackN, k.kstackLost
	}
	cnt, err := k.w.Counters()
	if err == nil {
		// Aggregated: the ring's losses are stacks, not samples; the
		// samples lost are those whose stack never came, those the full
		// count map could not hold, and (--native) those the full native
		// ring could not.
		r.lost = k.unsent + cnt[kwalk.CAggFull] + cnt[kwalk.CNatLost]
		m.CountsRaced = cnt[kwalk.CCacheRaced]
	}
	if rt, runs, err := k.w.RunStats(); err == nil && runs > 0 && cnt[kwalk.CSamples] > 0 {
		m.BPFNSPerSample = float64(rt.Nanoseconds()) / float64(cnt[kwalk.CSamples])
	}
}
