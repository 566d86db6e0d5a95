package pyframes

import (
	"errors"
	"fmt"
	"sort"
	"syscall"
)

// Frame is one Python frame, innermost first in a Thread.
type Frame struct {
	Function string // co_qualname (co_name on 3.10)
	File     string
	Line     int // line of the instruction being executed (the call, for a caller)
	Code     uint64
	// Addr is the frame's own address (3.11+: its _PyInterpreterFrame,
	// which a generator or coroutine keeps inside its object; 3.10: its
	// PyFrameObject): one running frame, where Code is any run of a function.
	Addr uint64 `json:"-"`
	// CodeID is unique to the code object as read (a new one if its address
	// is reused): with Line it identifies the frame's label cheaply.
	CodeID uint64 `json:"-"`
	// Entry: this frame was entered from C (it sits right above an
	// interpreter entry, so a native _PyEval_EvalFrameDefault frame ends here).
	Entry bool
	// Link (with Options.Links, on an Entry frame, 3.11+): the C-stack
	// address of the eval loop's link to this run of frames (3.12+: its
	// entry-frame shim; 3.11: its _PyCFrame), which lies inside that
	// _PyEval_EvalFrameDefault's native frame; 0 when unknown.
	Link   uint64  `json:"-"`
	Locals []Local `json:",omitempty"`
	// Interp: the id of the interpreter the frame runs in (main: 0). A
	// thread that runs a sub-interpreter's code has its frames on top of
	// the calling interpreter's (Threads).
	Interp int64
}

// Thread is one OS thread: its thread state, or (Threads) its states in
// several interpreters, stacked.
type Thread struct {
	Interp     int64  // the interpreter of its newest frames
	Addr       uint64 // PyThreadState*
	ThreadID   uint64 // pthread_t, what threading.get_ident() returns
	NativeID   int    // kernel TID (0 on 3.10; filled by the session from /proc)
	Name       string
	HoldsGIL   bool
	Frames     []Frame
	Consistent bool // the stack did not change while it was read
	// Snapshot: the thread moved on during the read, but every frame came
	// from one read of its frame stack and validated (only with
	// Options.Snapshot): a real stack of a few µs earlier, not a mixture.
	Snapshot bool
	Retries  int
	Err      error
	// Truncated: the walk stopped after MaxDepth frames (C-stack shims
	// counted) with more below; Frames holds the innermost ones read
	// (Consistent still says whether the stack changed).
	Truncated bool
}

// Limits on one walk: garbage memory must not make it loop or allocate without bound.
const (
	MaxDepth     = 4096
	maxThreads   = 8192
	maxInterps   = 256
	defaultRetry = 3
)

// Options for a walk.
type Options struct {
	Locals  bool
	Names   bool // resolve threading names (one extra dict walk)
	Retries int  // torn-read retries per thread; 0 means the default
	// Snapshot accepts a stack that changed after it was read when all its
	// frames came from one read of the thread's frame stack (3.11+), instead
	// of retrying. Samplers use it: their sample is already in the past.
	Snapshot bool
	// Reuse returns frames in a buffer the next walk overwrites: for
	// samplers that fold a stack before reading the next (no allocation).
	Reuse bool
	// Links fills Frame.Link (3.11 reads the _PyCFrame chain for it: one
	// small read per eval loop): native stacks are glued by it.
	Links bool
	// Partial: the chain is cut on purpose (a resolver that lays a one-frame
	// stack over the target's memory); it need not reach the thread's
	// outermost frame.
	Partial bool
}

var ErrTorn = errors.New("stack changed while it was read")

// ErrTruncated: the stack is deeper than MaxDepth frames. Its innermost
// frames were read, and are returned with it: a stack cut short,
// not one that changed (Thread.Truncated; the thread's Err stays nil).
var ErrTruncated = fmt.Errorf("stack deeper than %d frames: only its innermost ones read", MaxDepth)

// ErrNoInterpreter: the runtime lists no interpreter, as before
// Py_Initialize and after Py_Finalize.
var ErrNoInterpreter = errors.New("no interpreter state: the interpreter is not initialised yet, or already finalised")

// Threads walks every interpreter's thread states and their stacks, one
// Thread per OS thread: a thread with states in several interpreters (it
// runs a sub-interpreter's code, entered from the calling interpreter's
// frames) is one Thread, its frames stacked (stackInterps). A thread is
// marked HoldsGIL only when its interpreter's GIL was held by it both
// before and after the walk, with no change of holder between
// (GILState.HeldThrough).
func (p *Process) Threads(opt Options) ([]Thread, error) {
	// A thread list that changed under the walk (a state freed as it was
	// passed) is walked again, a few times.
	for attempt := 0; ; attempt++ {
		out, err := p.threadsOnce(opt)
		if err == nil || !errors.Is(err, ErrTorn) || attempt == 2 {
			return out, err
		}
		p.Stats.TornRetries++
	}
}

func (p *Process) threadsOnce(opt Options) ([]Thread, error) {
	var out []Thread
	err := p.interps(func(id int64, interp uint64) error {
		before := p.gilState(interp)
		var names map[uint64]string
		if opt.Names {
			names, _ = p.threadNames(interp) // names are best effort: a stack without a name is still a stack
		}
		first := len(out)
		err := p.tstates(interp, func(ts uint64) (uint64, error) {
			t, next, err := p.thread(ts, interp, opt)
			if err != nil {
				return 0, err
			}
			t.Interp = id
			for i := range t.Frames {
				t.Frames[i].Interp = id
			}
			t.Name = names[t.ThreadID]
			out = append(out, t)
			return next, nil
		})
		if err != nil {
			return err
		}
		if holder := before.HeldThrough(p.gilState(interp)); holder != 0 {
			for i := first; i < len(out); i++ {
				out[i].HoldsGIL = out[i].Addr == holder
			}
		}
		return nil
	})
	return stackInterps(out), err
}

// stackInterps makes one Thread of the thread states one OS thread has in
// several interpreters (the same pthread_t and native id): the states
// with frames, the highest interpreter id on top, down to the lowest, the
// one the thread started in. A thread enters a sub-interpreter from a
// call in the interpreter it runs (run_string, Interpreter.exec): that
// call's frames are the callers of the sub-interpreter's. (Ids order the
// nesting unless a thread entered an older interpreter from a newer one;
// a state without frames — one left from an earlier run — adds nothing.)
func stackInterps(ts []Thread) []Thread {
	type osThread struct {
		id  uint64
		nid int
	}
	parts := map[osThread][]int{}
	multi := false
	for i, t := range ts {
		if t.ThreadID == 0 {
			continue // not bound to an OS thread yet
		}
		k := osThread{t.ThreadID, t.NativeID}
		parts[k] = append(parts[k], i)
		multi = multi || len(parts[k]) > 1
	}
	if !multi {
		return ts
	}
	out := make([]Thread, 0, len(ts))
	for i, t := range ts {
		k := osThread{t.ThreadID, t.NativeID}
		idx := parts[k]
		if t.ThreadID == 0 || len(idx) < 2 {
			out = append(out, t)
			continue
		}
		if idx[0] != i {
			continue // merged at its first state's place
		}
		group := make([]Thread, len(idx))
		for j, at := range idx {
			group[j] = ts[at]
		}
		sort.SliceStable(group, func(a, b int) bool { return group[a].Interp > group[b].Interp })
		m := Thread{ThreadID: t.ThreadID, NativeID: t.NativeID, Consistent: true, Snapshot: true, Interp: -1}
		for _, g := range group {
			if len(g.Frames) > 0 && m.Interp < 0 {
				m.Interp, m.Addr = g.Interp, g.Addr
			}
			m.Frames = append(m.Frames, g.Frames...)
			m.HoldsGIL = m.HoldsGIL || g.HoldsGIL
			m.Consistent = m.Consistent && g.Consistent
			m.Snapshot = m.Snapshot && g.Snapshot
			m.Retries += g.Retries
			if m.Err == nil {
				m.Err = g.Err
			}
		}
		last := group[len(group)-1]
		if m.Interp < 0 {
			m.Interp, m.Addr = last.Interp, last.Addr
		}
		// The threading name of the interpreter it started in.
		for j := len(group) - 1; j >= 0 && m.Name == ""; j-- {
			m.Name = group[j].Name
		}
		out = append(out, m)
	}
	return out
}

// interps calls fn for each interpreter in the runtime's list (bounded,
// cycle-safe), with the runtime's own id for it (PyInterpreterState.id:
// main = 0, sub-interpreters numbered as the runtime numbers them; the list
// itself is newest first). Where the id cannot be read, the list position.
func (p *Process) interps(fn func(id int64, interp uint64) error) error {
	l, r := p.Layout, &p.objs
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil {
		return fmt.Errorf("can't read the interpreter list: %w", err)
	}
	if interp == 0 {
		return ErrNoInterpreter
	}
	seen := map[uint64]bool{}
	for pos := int64(0); interp != 0 && pos < maxInterps && !seen[interp]; pos++ {
		seen[interp] = true
		id := pos
		if l.InterpID != 0 {
			if v, err := r.u64(interp + l.InterpID); err == nil && int64(v) >= 0 {
				id = int64(v)
			}
		}
		if err := fn(id, interp); err != nil {
			return err
		}
		if interp, err = r.u64(interp + l.InterpNext); err != nil {
			break
		}
	}
	return nil
}

// tstates calls fn for each thread state of interp; fn returns the next
// one (bounded, cycle-safe).
func (p *Process) tstates(interp uint64, fn func(ts uint64) (uint64, error)) error {
	ts, err := p.objs.u64(interp + p.Layout.InterpThreadsHead)
	if err != nil {
		return fmt.Errorf("can't read thread list of interpreter 0x%x: %w", interp, err)
	}
	seen := map[uint64]bool{}
	for n := 0; ts != 0 && n < maxThreads && !seen[ts]; n++ {
		seen[ts] = true
		if ts, err = fn(ts); err != nil {
			if n > 0 && !errors.Is(err, ErrTorn) && !errors.Is(err, syscall.ESRCH) {
				// Reached through the state before it, freed meanwhile
				// (its next pointer reused): a list that changed while read.
				err = fmt.Errorf("%w: %w", ErrTorn, err)
			}
			return err
		}
	}
	return nil
}

// ThreadRef identifies a thread state without reading its stack.
type ThreadRef struct {
	Interp   int64
	Addr     uint64 // PyThreadState*
	ThreadID uint64
	NativeID int // 0 when the version does not record it (3.10)
}

// ThreadRefs lists every interpreter's thread states (no frames): what a
// sampler needs to map a kernel TID to the thread state to walk.
func (p *Process) ThreadRefs() ([]ThreadRef, error) {
	l := p.Layout
	var out []ThreadRef
	err := p.interps(func(id int64, interp uint64) error {
		return p.tstates(interp, func(ts uint64) (uint64, error) {
			hdr, err := p.tstateHeader(ts, interp)
			if err != nil {
				return 0, err
			}
			ref := ThreadRef{Interp: id, Addr: ts, ThreadID: le64(hdr, l.TstateThreadID)}
			if l.TstateNativeThreadID != 0 {
				ref.NativeID = int(le64(hdr, l.TstateNativeThreadID))
			}
			out = append(out, ref)
			return le64(hdr, l.TstateNext), nil
		})
	})
	return out, err
}

// tstateHeader reads a thread state's header into a scratch buffer that the
// next call overwrites.
func (p *Process) tstateHeader(ts, interp uint64) ([]byte, error) {
	l, r := p.Layout, &p.objs
	size := int(max(l.TstateNext, l.TstateInterp, l.TstateFrame, l.TstateThreadID, l.TstateNativeThreadID, l.TstateBaseFrame) + 8)
	if cap(p.scratch.tsHdr) < size {
		p.scratch.tsHdr = make([]byte, size)
	}
	hdr := p.scratch.tsHdr[:size]
	if err := r.mem.Read(ts, hdr); err != nil {
		return nil, fmt.Errorf("can't read thread state 0x%x: %w", ts, err)
	}
	if got := le64(hdr, l.TstateInterp); interp != 0 && got != interp {
		// Most often a thread state freed (its memory reused) while the
		// list was read live.
		return nil, fmt.Errorf("thread state 0x%x points to interpreter 0x%x, not 0x%x: layout mismatch or torn list: %w", ts, got, interp, ErrTorn)
	}
	return hdr, nil
}

// GILHolder returns the thread state holding the main interpreter's GIL
// (3.12+: per interpreter; ≤3.11: the runtime's current thread), or 0.
func (p *Process) GILHolder() uint64 {
	if p.Layout.InterpCevalGIL == 0 {
		return p.gilState(0).Holder // one GIL for the runtime
	}
	interp, err := p.objs.u64(p.Info.Runtime + p.Layout.RuntimeInterpretersHead)
	if err != nil || interp == 0 {
		return 0
	}
	return p.gilState(interp).Holder
}

// Stack reads one thread's stack (innermost first), retrying torn reads.
// consistent is false when it changed under every attempt; the frames of
// the last attempt are returned with the error. With opt.Snapshot, a stack
// read in one piece while the thread moved on comes back with snapshot set.
func (p *Process) Stack(ts uint64, opt Options) (frames []Frame, consistent, snapshot bool, err error) {
	t, _, err := p.thread(ts, 0, opt)
	if err != nil {
		return nil, false, false, err
	}
	if t.Err == nil && t.Truncated {
		return t.Frames, t.Consistent, t.Snapshot, ErrTruncated
	}
	return t.Frames, t.Consistent, t.Snapshot, t.Err
}

// thread reads one thread state and walks its frames, retrying torn reads.
func (p *Process) thread(ts, interp uint64, opt Options) (Thread, uint64, error) {
	l := p.Layout
	hdr, err := p.tstateHeader(ts, interp)
	if err != nil {
		return Thread{}, 0, err
	}
	t := Thread{Addr: ts, ThreadID: le64(hdr, l.TstateThreadID)}
	if l.TstateNativeThreadID != 0 {
		t.NativeID = int(le64(hdr, l.TstateNativeThreadID))
	}
	next := le64(hdr, l.TstateNext)
	retries := opt.Retries
	if retries == 0 {
		retries = defaultRetry
	}
	tsFrame := le64(hdr, l.TstateFrame) // read before the walk reuses the buffer
	var base uint64                     // 3.15: where a whole chain ends
	if l.TstateBaseFrame != 0 {
		base = le64(hdr, l.TstateBaseFrame)
	}
	top, err := p.resolveTop(tsFrame)
	for attempt := 0; ; attempt++ {
		var frames []Frame
		var before frameID
		walked := top // the frame the walk began at
		if err == nil {
			frames, before, err = p.stack(top, tsFrame, base, opt)
			if err != nil && len(frames) == 0 {
				if cf, ptop, ok := p.entering(tsFrame); ok {
					frames, before, err = p.stack(ptop, cf, base, opt)
					walked = ptop
				}
			}
		}
		truncated := err == nil && p.scratch.truncated
		// Consistent means: the thread's top frame is the same frame — same
		// address, code object and caller — after the walk as before it.
		// Frames below the top cannot change without the top being popped.
		// (Its instruction pointer may move meanwhile: the line is the one
		// read, a moment within the walk.)
		var same bool
		var nextFrame, nextTop uint64
		if err == nil {
			nextFrame, nextTop, same, err = p.recheck(ts, tsFrame, top, walked, before)
		}
		if same {
			t.Frames, t.Consistent, t.Retries, t.Truncated = frames, true, attempt, truncated
			break
		}
		if err == nil && opt.Snapshot && p.scratch.allWindow && len(frames) > 0 {
			t.Frames, t.Snapshot, t.Retries, t.Truncated = frames, true, attempt, truncated
			p.Stats.Snapshots++
			break
		}
		if attempt >= retries {
			t.Frames, t.Retries = frames, attempt
			if err == nil {
				err = ErrTorn
			}
			t.Err = err
			p.Stats.Inconsistent++
			break
		}
		p.Stats.TornRetries++
		if nextFrame != 0 || nextTop != 0 {
			tsFrame, top, err = nextFrame, nextTop, nil
		} else if tsFrame, err = p.objs.u64(ts + l.TstateFrame); err == nil {
			top, err = p.resolveTop(tsFrame)
		}
	}
	return t, next, nil
}

// frameID is what identifies a frame's place in a stack.
type frameID struct{ code, previous uint64 }

func (p *Process) idOf(buf []byte) frameID {
	return frameID{code: le64(buf, p.Layout.FrameCode), previous: le64(buf, p.Layout.FramePrevious)}
}

// recheck re-reads, in one vectored read, the tstate's frame field (and on
// 3.11/3.12 the old cframe's current frame, which was top) and the
// identity of the frame the walk began at (walked: top, or the outer
// cframe's frame of an eval loop entering). same: nothing moved.
// Otherwise it returns the new frame field and, when it can tell without
// another read, the new top frame (else 0, 0).
func (p *Process) recheck(ts, tsFrame, top, walked uint64, before frameID) (uint64, uint64, bool, error) {
	l := p.Layout
	sc := &p.scratch
	a, c := sc.re[0:8], sc.re[8:16]
	fb := sc.re[16 : 16+l.FrameSize]
	segs := sc.reSegs[:0]
	segs = append(segs, Seg{Addr: ts + l.TstateFrame, Buf: a})
	cframe := l.CFrameCurrentFrame >= 0
	if cframe {
		segs = append(segs, Seg{Addr: tsFrame + uint64(l.CFrameCurrentFrame), Buf: c})
	}
	if walked != 0 {
		segs = append(segs, Seg{Addr: walked, Buf: fb})
	}
	sc.reSegs = segs
	if n := readV(p.objs.mem, segs); n < len(segs) {
		return 0, 0, false, &MemError{Pid: p.Pid, Addr: segs[n].Addr, Want: len(segs[n].Buf), Err: ErrUnmapped}
	}
	newFrame := le64(a, 0)
	newTop := newFrame
	if cframe {
		if newFrame != tsFrame {
			return 0, 0, false, nil // a new C-level eval loop: re-resolve
		}
		newTop = le64(c, 0)
	}
	same := newTop == top && (walked == 0 || p.idOf(fb) == before)
	return newFrame, newTop, same, nil
}

// entering handles 3.11/3.12's eval loop entry: it points the thread
// state at its new _PyCFrame (cframe.previous set) a few instructions
// before it sets the cframe's current frame, which holds stack garbage
// until then. The Python stack of that instant is the outer cframe's:
// its cframe and frame are returned when cf's frame could not be walked
// and the outer one is there. (The new run's frame is not linked yet: a
// native merge shows the new eval loop without Python frames.)
func (p *Process) entering(cf uint64) (outer, top uint64, ok bool) {
	l := p.Layout
	if l.CFrameCurrentFrame < 0 || l.CFramePrevious == 0 || cf == 0 {
		return 0, 0, false
	}
	outer, err := p.objs.u64(cf + l.CFramePrevious)
	if err != nil || outer == 0 {
		return 0, 0, false
	}
	top, err = p.objs.u64(outer + uint64(l.CFrameCurrentFrame))
	if err != nil || top == 0 {
		return 0, 0, false
	}
	return outer, top, true
}

// resolveTop turns the tstate's frame field into the first frame address.
func (p *Process) resolveTop(v uint64) (uint64, error) {
	l := p.Layout
	if l.CFrameCurrentFrame < 0 || v == 0 {
		return v, nil
	}
	return p.objs.u64(v + uint64(l.CFrameCurrentFrame))
}

// rawFrame is a frame as found in memory, before its code is resolved.
type rawFrame struct {
	addr, code, instr uint64
	link              uint64
	lineno            int32 // 3.10 f_lineno
	tlbc              int32 // 3.14t tlbc_index: 0 unless the frame runs a thread's bytecode copy
	entry             bool
}

// windowPages is how much of the thread's frame stack one read fetches
// below the top frame (3.11+: frames live in contiguous data-stack chunks).
const windowPages = 4

// readWindow fetches up to windowPages pages ending just above the top
// frame, in one vectored read ordered downwards, so it stops cleanly at the
// bottom of the mapping. It returns the window's base address and bytes.
func (p *Process) readWindow(top uint64) (uint64, []byte) {
	const page = 4096
	l := p.Layout
	if l.FrameObjects || top == 0 {
		return 0, nil // 3.10 frames are separate heap objects
	}
	end := (top + l.FrameSize + page - 1) &^ (page - 1)
	if cap(p.scratch.window) < windowPages*page {
		p.scratch.window = make([]byte, windowPages*page)
	}
	win := p.scratch.window[:windowPages*page]
	if end >= windowPages*page {
		// Usually the whole window is mapped: one segment is cheapest.
		one := append(p.scratch.winSegs[:0], Seg{Addr: end - windowPages*page, Buf: win})
		p.scratch.winSegs = one
		if readV(p.objs.mem, one) == 1 {
			return end - windowPages*page, win
		}
	}
	segs := p.scratch.winSegs[:0]
	for i := 0; i < windowPages; i++ {
		lo := end - uint64(i+1)*page
		if lo > end { // wrapped below zero
			break
		}
		off := (windowPages - 1 - i) * page
		segs = append(segs, Seg{Addr: lo, Buf: win[off : off+page]})
	}
	n := readV(p.objs.mem, segs)
	p.scratch.winSegs = segs[:0]
	if n == 0 {
		return 0, nil
	}
	base := end - uint64(n)*page
	return base, win[(windowPages-n)*page:]
}

// missPages is how much one read fetches around a frame outside the window.
const missPages = 2

// readMissWindow fetches missPages pages ending just above the frame at
// addr in one read, into the single-frame buffer (grown for it); nil when
// that fails (the caller then reads the frame alone, into the same buffer).
func (p *Process) readMissWindow(addr uint64) (uint64, []byte) {
	const page = 4096
	l := p.Layout
	end := (addr + l.FrameSize + page - 1) &^ (page - 1)
	if end < missPages*page || end < addr {
		return 0, nil // wrapped: a garbage address from a torn read
	}
	if cap(p.scratch.miss) < missPages*page {
		p.scratch.miss = make([]byte, missPages*page)
	}
	w := p.scratch.miss[:missPages*page]
	segs := append(p.scratch.winSegs[:0], Seg{Addr: end - missPages*page, Buf: w})
	p.scratch.winSegs = segs
	if readV(p.objs.mem, segs) != 1 {
		return 0, nil
	}
	return end - missPages*page, w
}

// stack walks frames from the top frame at addr: frame headers come from
// the window when they lie in it, else from one read each; code objects are
// then resolved together. A chain that does not end at the thread's
// outermost frame (baseFrame: 3.15's tstate->base_frame) is reported incomplete
// (ErrIncomplete, a torn read): see framemodel.go.
func (p *Process) stack(addr, tsFrame, baseFrame uint64, opt Options) ([]Frame, frameID, error) {
	l, r := p.Layout, &p.objs
	model, _ := FrameModelFor(l.Version.Minor)
	var topID frameID
	var last LastFrame // the last frame visited (shims included)
	var callee uint64  // the last Python frame visited, when it is a data-stack frame in the window
	calleeInWin := false
	base, win := p.readWindow(addr)
	p.scratch.allWindow = win != nil
	raw := p.scratch.raw[:0]
	if cap(p.scratch.frame) < int(l.FrameSize) {
		p.scratch.frame = make([]byte, l.FrameSize)
	}
	fbuf := p.scratch.frame[:l.FrameSize]
	// A frame outside the window (an older data-stack chunk, a generator's
	// frame in its heap object; every 3.10 PyFrameObject) brings one more
	// window read around it, kept for the frames that follow: those near it
	// come from the copy.
	var base2 uint64
	var win2 []byte
	var err error
	p.scratch.truncated = false
	// A cycle is told from depth by meeting a frame again (Brent: the
	// address at each power-of-two step is kept and compared with those
	// that follow): found within twice its length, in constant memory.
	mark, span, steps := addr, 1, 0
	for depth := 0; addr != 0; depth++ {
		if depth > 0 && addr == mark {
			err = fmt.Errorf("frame 0x%x seen twice in one walk: the chain loops: %w", addr, ErrTorn)
			break
		}
		if steps == span {
			mark, span, steps = addr, span*2, 0
		}
		steps++
		if depth >= MaxDepth {
			// No loop met: a stack this deep. Its innermost frames stand
			// (a loop longer than half of MaxDepth would land here too).
			p.scratch.truncated = true
			break
		}
		var buf []byte
		inWindow := within(addr, l.FrameSize, base, win)
		inWin2 := within(addr, l.FrameSize, base2, win2)
		if !inWindow && !inWin2 {
			base2, win2 = p.readMissWindow(addr)
			inWin2 = within(addr, l.FrameSize, base2, win2)
		}
		if inWindow {
			buf = win[addr-base : addr-base+l.FrameSize]
		} else if inWin2 {
			buf = win2[addr-base2 : addr-base2+l.FrameSize]
		} else {
			if rerr := r.mem.Read(addr, fbuf); rerr != nil {
				err = fmt.Errorf("can't read frame 0x%x: %w", addr, rerr)
				break
			}
			buf = fbuf
		}
		if depth == 0 {
			topID = p.idOf(buf)
		}
		prev := le64(buf, l.FramePrevious)
		last = LastFrame{Addr: addr}
		if l.FrameObjects {
			if model.FrameGen != 0 && model.FrameGen+8 <= uint64(len(buf)) {
				last.Gen = le64(buf, model.FrameGen)
			}
		} else {
			last.Owner = buf[l.FrameOwner]
			last.Entry = l.FrameIsEntry >= 0 && buf[l.FrameIsEntry] != 0
		}
		dataStack := !l.FrameObjects && inWindow && last.Owner == model.OwnerThread
		if dataStack && calleeInWin && addr > callee {
			// Data-stack frames grow upwards: a THREAD frame's THREAD
			// caller above it, both in one read of the stack, means the
			// chain was being rewritten. (A generator's or coroutine's
			// frame lives in its own heap object, anywhere: no order.)
			err = fmt.Errorf("frame 0x%x: caller 0x%x lies above it: %w", callee, addr, ErrTorn)
			break
		}
		if l.FrameObjects {
			if r.types.frame != 0 && le64(buf, l.ObType) != r.types.frame {
				err = fmt.Errorf("frame 0x%x: %w (%w)", addr, errWrongType, ErrTorn)
				break
			}
		} else if l.FrameOwnerSkip != 0 && buf[l.FrameOwner] >= l.FrameOwnerSkip {
			// A C-stack shim or the thread's base frame: not Python code. The
			// frame above it was entered from C.
			if len(raw) > 0 {
				raw[len(raw)-1].entry = true
				if raw[len(raw)-1].link == 0 {
					// The shim below a run (3.12+): the eval loop's own
					// entry frame, on its C stack. (A thread's base frame
					// is in the data stack: it matches no native frame.)
					raw[len(raw)-1].link = addr
				}
			}
			addr = prev
			continue
		}
		callee, calleeInWin = addr, dataStack
		if !inWindow {
			// A Python frame read on its own (a generator's, or one in an
			// older chunk): the stack is not from a single read any more.
			// (C-stack shims skipped above don't count: they only link.)
			p.scratch.allWindow = false
		}
		code := le64(buf, l.FrameCode)
		if l.CodeTagged {
			code &^= 3
		}
		if code == 0 {
			if len(raw) == 0 {
				// The newest frame is still being pushed (3.15 links it in
				// before setting f_executable): the thread is entering a
				// call from its caller's line. Leave it out.
				addr = prev
				continue
			}
			err = fmt.Errorf("frame 0x%x has no code object: %w", addr, ErrTorn)
			break
		}
		last.Code = code
		rf := rawFrame{addr: addr, code: code, instr: le64(buf, l.FrameInstr)}
		if l.FrameTLBCIndex != 0 {
			rf.tlbc = int32(le32(buf, l.FrameTLBCIndex))
		}
		if l.FrameObjects {
			rf.instr = uint64(int64(int32(le32(buf, l.FrameInstr))))
			rf.lineno = int32(le32(buf, l.FrameLineno))
			rf.entry = true // 3.10: every Python call has its own C eval frame
		} else if l.FrameIsEntry >= 0 && buf[l.FrameIsEntry] != 0 {
			rf.entry = true
		}
		raw = append(raw, rf)
		addr = prev
	}
	p.scratch.raw = raw[:0]
	if len(raw) == 0 {
		return nil, topID, err
	}
	if err == nil && model.End != 0 && !opt.Partial && !p.scratch.truncated {
		whole := model.Whole(last, baseFrame)
		if whole && model.CodeFlags != 0 {
			flags, ferr := r.u32(last.Code + model.CodeFlags)
			whole = ferr == nil && flags&GeneratorCodeFlags == 0
		}
		if !whole {
			err = fmt.Errorf("frame 0x%x ends the chain, not %s: %w", last.Addr, model.End, ErrIncomplete)
		}
	}
	if opt.Links && l.FrameIsEntry >= 0 && l.CFrameCurrentFrame >= 0 && err == nil {
		p.cframeLinks(raw, tsFrame)
	}
	codes := p.scratch.codes[:0]
	for _, rf := range raw {
		codes = append(codes, rf.code)
	}
	if cap(p.scratch.infos) < len(codes) {
		p.scratch.infos = make([]*codeInfo, len(codes))
	}
	infos := p.scratch.infos[:len(codes)]
	p.scratch.codes = codes[:0]
	if cerr := p.codesOf(codes, infos); cerr != nil {
		return nil, topID, cerr
	}
	var frames []Frame
	if opt.Reuse {
		if cap(p.scratch.out) < len(raw) {
			p.scratch.out = make([]Frame, len(raw), 2*len(raw))
		}
		frames = p.scratch.out[:len(raw)]
	} else {
		frames = make([]Frame, len(raw))
	}
	for i, rf := range raw {
		ci := infos[i]
		f := Frame{Function: ci.name, File: ci.file, Code: rf.code, CodeID: ci.serial, Entry: rf.entry, Addr: rf.addr}
		if opt.Links && rf.entry {
			f.Link = rf.link
		}
		switch {
		case l.FrameObjects && rf.lineno > 0: // f_lineno is set only while tracing; then it is the truth
			f.Line = int(rf.lineno)
		case l.FrameObjects:
			f.Line = ci.line310(int(int64(rf.instr)) * 2)
		default:
			f.Line = ci.line(int((int64(rf.instr) - int64(p.instrBase(rf.code, rf.tlbc))) / 2))
		}
		if opt.Locals {
			f.Locals = p.locals(rf.addr, ci)
		}
		frames[i] = f
	}
	return frames, topID, err
}

// cframeLinks (3.11) pairs each run of frames, innermost first, with the
// _PyCFrame chain from the thread state's cframe: the k-th cframe's
// current_frame must be the innermost frame of the k-th run, else the
// chain moved under the read and no link is set.
func (p *Process) cframeLinks(raw []rawFrame, cf uint64) {
	l := p.Layout
	var buf [24]byte
	hdr := buf[:max(uint64(l.CFrameCurrentFrame), l.CFramePrevious)+8]
	start := 0 // innermost frame of the current run
	for i := range raw {
		if !raw[i].entry {
			continue
		}
		if cf == 0 || p.objs.mem.Read(cf, hdr) != nil || le64(hdr, uint64(l.CFrameCurrentFrame)) != raw[start].addr {
			for j := range raw {
				raw[j].link = 0
			}
			return
		}
		raw[i].link = cf
		cf = le64(hdr, l.CFramePrevious)
		start = i + 1
	}
}

// within reports whether size bytes at addr lie inside the copy win of
// memory starting at base; a garbage address (below base, or so high that
// addr+size wraps) is outside, never an index past the copy.
func within(addr, size, base uint64, win []byte) bool {
	n := uint64(len(win))
	return win != nil && addr >= base && size <= n && addr-base <= n-size
}
