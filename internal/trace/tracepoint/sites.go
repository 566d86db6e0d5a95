package tracepoint

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// OffsetsFor returns the kernel program's frame offsets for a layout, or
// nil where the kernel cannot read the frame (3.10's frame objects).
func OffsetsFor(l *pyframes.Layout) *PyOffsets {
	if l == nil || l.FrameObjects || l.FrameSize == 0 || l.FrameSize > fakeCFrame-fakeFrame {
		return nil
	}
	if l.CFrameCurrentFrame >= fakeCFrame-fakeFrame {
		return nil
	}
	return &PyOffsets{
		TstateFrame: l.TstateFrame, CFrameCurrent: l.CFrameCurrentFrame, FramePrevious: l.FramePrevious,
		FrameCode: l.FrameCode, FrameInstr: l.FrameInstr, FrameOwner: l.FrameOwner, OwnerSkip: l.FrameOwnerSkip,
		RuntimeInterpHead: l.RuntimeInterpretersHead, InterpThreadsHead: l.InterpThreadsHead,
		TstateNext: l.TstateNext, TstateNativeTid: l.TstateNativeThreadID,
	}
}

// WithRuntime completes o with the target's &_PyRuntime (turning on the
// kernel's thread-list walk where the layout has native thread ids).
func (o *PyOffsets) WithRuntime(runtime uint64) *PyOffsets {
	if o != nil {
		o.Runtime = runtime
	}
	return o
}

// Addresses below mmap_min_addr (64 KiB) are never mapped in the target:
// the walker's reads there can only be served by the overlay.
const (
	fakeFrame  = 0x1000
	fakeCFrame = 0x2000
)

// Resolver turns a frame captured in the kernel into a Python site with
// the walker of pyframes: it reads the thread's stack through a memory in
// which the thread state points to a one-frame stack holding the captured
// code object and instruction pointer. Code objects, names and line tables
// are read live (and cached); they do not change while the code exists.
type Resolver struct {
	p   *pyframes.Process
	mem *overlay
	// seen: (code, instr) pairs resolved while the target was readable. Used
	// only when the live read fails (the target exited before its last
	// events were read): a code object does not change while it exists.
	seen map[[2]uint64]pyframes.Frame
	// FromCache counts sites resolved from seen.
	FromCache uint64
}

// NewResolver builds a walker for pid over live memory plus an overlay.
func NewResolver(pid int, live pyframes.Memory, info *pyframes.RuntimeInfo) (*Resolver, error) {
	ov := &overlay{live: live}
	p, err := pyframes.New(ov, pid, info)
	if err != nil {
		return nil, err
	}
	if OffsetsFor(p.Layout) == nil {
		return nil, fmt.Errorf("pid %d: Python %s frames can't be read in the kernel", pid, p.Version())
	}
	return &Resolver{p: p, mem: ov, seen: map[[2]uint64]pyframes.Frame{}}, nil
}

// ErrNoSite: the captured frame yielded no Python frame.
var ErrNoSite = errors.New("no Python frame in the captured stack")

// Site resolves the innermost frame of e (Py == PyCaptured) in the thread
// state the kernel used.
func (r *Resolver) Site(e Event) (pyframes.Frame, error) {
	tstate := e.Tstate
	l := r.p.Layout
	le := binary.LittleEndian
	frame := make([]byte, l.FrameSize)
	le.PutUint64(frame[l.FrameCode:], e.Code)
	le.PutUint64(frame[l.FrameInstr:], e.Instr)
	le.PutUint64(frame[l.FramePrevious:], 0) // a one-frame stack
	top := make([]byte, 8)
	regs := []region{{fakeFrame, frame}}
	if l.CFrameCurrentFrame >= 0 {
		le.PutUint64(top, fakeCFrame)
		cf := make([]byte, 8)
		le.PutUint64(cf, fakeFrame)
		regs = append(regs, region{fakeCFrame + uint64(l.CFrameCurrentFrame), cf})
	} else {
		le.PutUint64(top, fakeFrame)
	}
	regs = append(regs, region{tstate + l.TstateFrame, top})
	r.mem.regs = regs
	defer func() { r.mem.regs = nil }()
	key := [2]uint64{e.Code, e.Instr}
	frames, _, _, err := r.p.Stack(tstate, pyframes.Options{Retries: 1, Partial: true})
	if err == nil && len(frames) == 0 {
		err = ErrNoSite
	}
	if err != nil {
		if f, ok := r.seen[key]; ok {
			r.FromCache++
			return f, nil
		}
		return pyframes.Frame{}, fmt.Errorf("tid %d frame 0x%x code 0x%x: %w", e.Tid, e.Frame, e.Code, err)
	}
	if len(r.seen) >= 1<<16 {
		clear(r.seen)
	}
	r.seen[key] = frames[0]
	return frames[0], nil
}

type region struct {
	addr uint64
	data []byte
}

// overlay serves reads from live memory with regions laid over it; a read
// wholly inside a region never touches the target.
type overlay struct {
	live pyframes.Memory
	regs []region
}

func (o *overlay) Read(addr uint64, p []byte) error {
	end := addr + uint64(len(p))
	for _, g := range o.regs {
		if addr >= g.addr && end <= g.addr+uint64(len(g.data)) {
			copy(p, g.data[addr-g.addr:])
			return nil
		}
	}
	if err := o.live.Read(addr, p); err != nil {
		return err
	}
	for _, g := range o.regs {
		gend := g.addr + uint64(len(g.data))
		if g.addr < end && gend > addr {
			lo, hi := max(addr, g.addr), min(end, gend)
			copy(p[lo-addr:hi-addr], g.data[lo-g.addr:hi-g.addr])
		}
	}
	return nil
}

func (o *overlay) ReadV(segs []pyframes.Seg) int {
	if v, ok := o.live.(pyframes.VectorMemory); ok && !o.touches(segs) {
		return v.ReadV(segs)
	}
	for i, s := range segs {
		if o.Read(s.Addr, s.Buf) != nil {
			return i
		}
	}
	return len(segs)
}

func (o *overlay) touches(segs []pyframes.Seg) bool {
	for _, s := range segs {
		for _, g := range o.regs {
			if g.addr < s.Addr+uint64(len(s.Buf)) && g.addr+uint64(len(g.data)) > s.Addr {
				return true
			}
		}
	}
	return false
}
