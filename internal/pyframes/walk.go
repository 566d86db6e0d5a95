package pyframes

import (
	"errors"
	"fmt"
)

// Frame is one Python frame, innermost first in a Thread.
type Frame struct {
	Function string // co_qualname (co_name on 3.10)
	File     string
	Line     int // line of the instruction being executed (the call, for a caller)
	Code     uint64
	// Entry: this frame was entered from C (it sits right above an
	// interpreter entry, so a native _PyEval_EvalFrameDefault frame ends here).
	Entry  bool
	Locals []Local `json:",omitempty"`
}

// Thread is one thread state of one interpreter.
type Thread struct {
	Interp     int64
	Addr       uint64 // PyThreadState*
	ThreadID   uint64 // pthread_t, what threading.get_ident() returns
	NativeID   int    // kernel TID (0 on 3.10; filled by the session from /proc)
	Name       string
	HoldsGIL   bool
	Frames     []Frame
	Consistent bool // the stack did not change while it was read
	Retries    int
	Err        error
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
}

var ErrTorn = errors.New("stack changed while it was read")

// Threads walks every interpreter's thread states and their stacks.
func (p *Process) Threads(opt Options) ([]Thread, error) {
	l := p.Layout
	r := &p.objs
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil {
		return nil, fmt.Errorf("can't read the interpreter list: %w", err)
	}
	if interp == 0 {
		return nil, errors.New("interpreter not initialised (or finalised): no interpreter state")
	}
	var holderOld uint64
	if l.RuntimeTstateCurrent != 0 {
		holderOld, _ = r.u64(p.Info.Runtime + l.RuntimeTstateCurrent)
	}
	var out []Thread
	seenInterp := map[uint64]bool{}
	for id := int64(0); interp != 0 && id < maxInterps && !seenInterp[interp]; id++ {
		seenInterp[interp] = true
		holder := holderOld
		if l.InterpCevalGIL != 0 {
			holder = p.gilHolder(interp)
		}
		var names map[uint64]string
		if opt.Names {
			names, _ = p.threadNames(interp) // names are best effort: a stack without a name is still a stack
		}
		ts, err := r.u64(interp + l.InterpThreadsHead)
		if err != nil {
			return out, fmt.Errorf("can't read thread list of interpreter 0x%x: %w", interp, err)
		}
		seen := map[uint64]bool{}
		for n := 0; ts != 0 && n < maxThreads && !seen[ts]; n++ {
			seen[ts] = true
			t, next, err := p.thread(ts, interp, opt)
			if err != nil {
				return out, err
			}
			t.Interp = id
			t.HoldsGIL = holder != 0 && holder == ts
			t.Name = names[t.ThreadID]
			out = append(out, t)
			ts = next
		}
		if interp, err = r.u64(interp + l.InterpNext); err != nil {
			break
		}
	}
	return out, nil
}

func (p *Process) gilHolder(interp uint64) uint64 {
	l, r := p.Layout, &p.objs
	gil, err := r.u64(interp + l.InterpCevalGIL)
	if err != nil || gil == 0 {
		return 0
	}
	locked, err := r.u32(gil + l.GILLocked)
	if err != nil || locked == 0 {
		return 0 // last_holder is not cleared on release: only trust it while locked
	}
	h, _ := r.u64(gil + l.GILLastHolder)
	return h
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
	l, r := p.Layout, &p.objs
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil {
		return nil, fmt.Errorf("can't read the interpreter list: %w", err)
	}
	var out []ThreadRef
	seenInterp := map[uint64]bool{}
	for id := int64(0); interp != 0 && id < maxInterps && !seenInterp[interp]; id++ {
		seenInterp[interp] = true
		ts, err := r.u64(interp + l.InterpThreadsHead)
		if err != nil {
			return out, fmt.Errorf("can't read thread list of interpreter 0x%x: %w", interp, err)
		}
		seen := map[uint64]bool{}
		for n := 0; ts != 0 && n < maxThreads && !seen[ts]; n++ {
			seen[ts] = true
			hdr, err := p.tstateHeader(ts, interp)
			if err != nil {
				return out, err
			}
			ref := ThreadRef{Interp: id, Addr: ts, ThreadID: le64(hdr, l.TstateThreadID)}
			if l.TstateNativeThreadID != 0 {
				ref.NativeID = int(le64(hdr, l.TstateNativeThreadID))
			}
			out = append(out, ref)
			ts = le64(hdr, l.TstateNext)
		}
		if interp, err = r.u64(interp + l.InterpNext); err != nil {
			break
		}
	}
	return out, nil
}

func (p *Process) tstateHeader(ts, interp uint64) ([]byte, error) {
	l, r := p.Layout, &p.objs
	size := max(l.TstateNext, l.TstateInterp, l.TstateFrame, l.TstateThreadID, l.TstateNativeThreadID) + 8
	hdr := make([]byte, size)
	if err := r.mem.Read(ts, hdr); err != nil {
		return nil, fmt.Errorf("can't read thread state 0x%x: %w", ts, err)
	}
	if got := le64(hdr, l.TstateInterp); interp != 0 && got != interp {
		return nil, fmt.Errorf("thread state 0x%x points to interpreter 0x%x, not 0x%x: layout mismatch or torn list", ts, got, interp)
	}
	return hdr, nil
}

// GILHolder returns the thread state holding the main interpreter's GIL
// (3.12+: per interpreter; ≤3.11: the runtime's current thread), or 0.
func (p *Process) GILHolder() uint64 {
	l, r := p.Layout, &p.objs
	if l.RuntimeTstateCurrent != 0 {
		h, _ := r.u64(p.Info.Runtime + l.RuntimeTstateCurrent)
		return h
	}
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil || interp == 0 {
		return 0
	}
	return p.gilHolder(interp)
}

// Stack reads one thread's stack (innermost first), retrying torn reads.
// consistent is false when it changed under every attempt; the frames of
// the last attempt are returned with the error.
func (p *Process) Stack(ts uint64, opt Options) ([]Frame, bool, error) {
	t, _, err := p.thread(ts, 0, opt)
	if err != nil {
		return nil, false, err
	}
	return t.Frames, t.Consistent, t.Err
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
	retries := opt.Retries
	if retries == 0 {
		retries = defaultRetry
	}
	top, err := p.resolveTop(le64(hdr, l.TstateFrame))
	for attempt := 0; ; attempt++ {
		var before frameID
		if err == nil && top != 0 {
			before, err = p.frameIdentity(top)
		}
		var frames []Frame
		if err == nil {
			frames, err = p.stack(top, opt)
		}
		// Consistent means: the thread's top frame is the same frame — same
		// address, code object and caller — after the walk as before it.
		// Frames below the top cannot change without the top being popped.
		// (Its instruction pointer may move meanwhile: the line is the one
		// read, a moment within the walk.)
		after, rerr := p.topFrameAt(ts)
		same := err == nil && rerr == nil && after == top
		if same && top != 0 {
			now, nerr := p.frameIdentity(top)
			same = nerr == nil && now == before
		}
		if same {
			t.Frames, t.Consistent, t.Retries = frames, true, attempt
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
		top, err = after, rerr
	}
	return t, le64(hdr, l.TstateNext), nil
}

// frameID is what identifies a frame's place in a stack.
type frameID struct{ code, previous uint64 }

func (p *Process) frameIdentity(addr uint64) (frameID, error) {
	l := p.Layout
	lo, hi := min(l.FrameCode, l.FramePrevious), max(l.FrameCode, l.FramePrevious)+8
	var b [128]byte
	if hi-lo > uint64(len(b)) {
		return frameID{}, fmt.Errorf("frame layout: code and previous %d bytes apart", hi-lo)
	}
	if err := p.objs.mem.Read(addr+lo, b[:hi-lo]); err != nil {
		return frameID{}, err
	}
	return frameID{code: le64(b[:], l.FrameCode-lo), previous: le64(b[:], l.FramePrevious-lo)}, nil
}

// topFrameAt returns the address of the thread's current top frame.
func (p *Process) topFrameAt(ts uint64) (uint64, error) {
	v, err := p.objs.u64(ts + p.Layout.TstateFrame)
	if err != nil {
		return 0, err
	}
	return p.resolveTop(v)
}

// resolveTop turns the tstate's frame field into the first frame address.
func (p *Process) resolveTop(v uint64) (uint64, error) {
	l := p.Layout
	if l.CFrameCurrentFrame < 0 || v == 0 {
		return v, nil
	}
	return p.objs.u64(v + uint64(l.CFrameCurrentFrame))
}

// stack walks frames from the top frame at addr.
func (p *Process) stack(addr uint64, opt Options) ([]Frame, error) {
	l, r := p.Layout, &p.objs
	var frames []Frame
	buf := make([]byte, l.FrameSize)
	seen := map[uint64]bool{}
	for depth := 0; addr != 0; depth++ {
		if depth >= MaxDepth {
			return frames, fmt.Errorf("stack deeper than %d frames (or a cycle)", MaxDepth)
		}
		if seen[addr] {
			return frames, fmt.Errorf("frame 0x%x repeats: cycle in the frame chain", addr)
		}
		seen[addr] = true
		if err := r.mem.Read(addr, buf); err != nil {
			return frames, fmt.Errorf("can't read frame 0x%x: %w", addr, err)
		}
		prev := le64(buf, l.FramePrevious)
		if l.FrameObjects {
			if r.types.frame != 0 && le64(buf, l.ObType) != r.types.frame {
				return frames, fmt.Errorf("frame 0x%x: %w", addr, errWrongType)
			}
		} else if l.FrameOwnerSkip != 0 && buf[l.FrameOwner] >= l.FrameOwnerSkip {
			// A C-stack shim or the thread's base frame: not Python code. The
			// frame above it was entered from C.
			if len(frames) > 0 {
				frames[len(frames)-1].Entry = true
			}
			addr = prev
			continue
		}
		code := le64(buf, l.FrameCode)
		if l.CodeTagged {
			code &^= 3
		}
		ci, err := p.code(code)
		if err != nil {
			return frames, fmt.Errorf("frame 0x%x: %w", addr, err)
		}
		f := Frame{Function: ci.name, File: ci.file, Code: code}
		if l.FrameObjects {
			// f_lineno is only set while tracing; then it is the truth.
			if ln := int32(le32(buf, l.FrameLineno)); ln > 0 {
				f.Line = int(ln)
			} else {
				f.Line = ci.line310(int(int32(le32(buf, l.FrameInstr))) * 2)
			}
			f.Entry = true // 3.10: every Python call has its own C eval frame
		} else {
			instr := le64(buf, l.FrameInstr)
			addrq := (int64(instr) - int64(code+l.CodeAdaptive)) / 2
			f.Line = ci.line(int(addrq))
			if l.FrameIsEntry >= 0 && buf[l.FrameIsEntry] != 0 {
				f.Entry = true
			}
		}
		if opt.Locals {
			f.Locals = p.locals(addr, ci)
		}
		frames = append(frames, f)
		addr = prev
	}
	return frames, nil
}
