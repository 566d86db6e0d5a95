package pyframes

import (
	"errors"
	"fmt"
)

// What internal/greenlet needs from an attached interpreter: raw reads, a
// frame chain that is not a thread's (a suspended greenlet's), a module
// attribute, type names and bases, and the GC lists that hold every
// container object.

// Mem is the Memory the process is read through.
func (p *Process) Mem() Memory { return p.objs.mem }

// FramesFrom walks a frame chain from its top frame, innermost first: 3.10
// a PyFrameObject*, 3.11+ a _PyInterpreterFrame*. The chain need not reach
// a thread's outermost frame (a greenlet's ends at its run function).
func (p *Process) FramesFrom(top uint64) ([]Frame, error) {
	frames, _, err := p.stack(top, 0, 0, Options{Partial: true})
	return frames, err
}

// Str reads a str object (at most maxChars characters).
func (p *Process) Str(addr uint64, maxChars int) (string, error) { return p.objs.str(addr, maxChars) }

// ModuleStr reads sys.modules[module].attr of the main interpreter, a str.
func (p *Process) ModuleStr(module, attr string) (string, error) {
	l, r := p.Layout, &p.objs
	interp, err := p.MainInterp()
	if err != nil {
		return "", err
	}
	if l.InterpModules == 0 {
		return "", errors.New("no sys.modules offset for this version")
	}
	modules, err := r.u64(interp + l.InterpModules)
	if err != nil || modules == 0 {
		return "", fmt.Errorf("can't read sys.modules of interpreter 0x%x: %v", interp, err)
	}
	mod, err := r.dictGetStr(modules, module)
	if err != nil {
		return "", fmt.Errorf("module %s not imported", module)
	}
	// PyModuleObject: the header, then md_dict.
	dict, err := r.u64(mod + 16 + l.objectHeaderGrowth())
	if err != nil || dict == 0 {
		return "", fmt.Errorf("can't read module %s's dict at 0x%x: %v", module, mod, err)
	}
	v, err := r.dictGetStr(dict, attr)
	if err != nil {
		return "", fmt.Errorf("%s.%s: %w", module, attr, err)
	}
	return r.str(v, 64)
}

// MainInterp is the address of the main (first) interpreter state.
func (p *Process) MainInterp() (uint64, error) {
	interp, err := p.objs.u64(p.Info.Runtime + p.Layout.RuntimeInterpretersHead)
	if err != nil {
		return 0, fmt.Errorf("can't read the interpreter list at 0x%x: %w", p.Info.Runtime+p.Layout.RuntimeInterpretersHead, err)
	}
	if interp == 0 {
		return 0, errors.New("no interpreter")
	}
	return interp, nil
}

// typeBase: tp_base in PyTypeObject, the same 3.10–3.15
// (Include/cpython/object.h: after the PyVarObject header and 29
// pointer-sized fields).
const typeBase = 256

// TypeName reads tp_name of the type at tp.
func (p *Process) TypeName(tp uint64) string { return p.typeName(tp) }

// TypeBase reads tp_base of the type at tp.
func (p *Process) TypeBase(tp uint64) (uint64, error) {
	return p.objs.u64(tp + typeBase + p.Layout.objectHeaderGrowth())
}

// GCHeadSize is sizeof(PyGC_Head) on GIL builds: _gc_next, _gc_prev, in
// front of every GC-tracked object.
const GCHeadSize = 16

// gcGenerations: where each GC list head (a PyGC_Head, in a struct
// gc_generation) lies inside struct _gc_runtime_state, per minor, and where
// that struct lies in PyInterpreterState before the debug offsets say so.
// 3.10–3.13: generations[0..2] at 24, 48, 72, permanent_generation at 104
// (DWARF of pyenv's 3.10.13, 3.11.7, 3.12.1, 3.13.0 libpython: gdb
// `ptype /o struct _gc_runtime_state`); interp->gc at 0x268 (3.10.13),
// 0x288 (3.11.7), 0x70 (3.12.1) (same DWARF; 3.13+: debug offsets
// interpreter_state.gc). 3.14: generations[0..2] and permanent_generation
// at 24, 48, 72, 96 (measured on sid 3.14.10: the self-consistent list heads
// in the struct, their objects moving to 72 after gc.collect() and to 96
// after gc.freeze()); 3.15: at 8, 32, 56, 80
// (Include/internal/pycore_interp_structs.h: only the enabled and debug
// ints before them; measured the same way on sid 3.15.2).
// Every head is checked to be one (its neighbours point back at it) before
// its list is walked.
func gcGenerations(minor int) (interpGC uint64, heads []uint64, ok bool) {
	switch minor {
	case 10:
		return 0x268, []uint64{24, 48, 72, 104}, true
	case 11:
		return 0x288, []uint64{24, 48, 72, 104}, true
	case 12:
		return 0x70, []uint64{24, 48, 72, 104}, true
	case 13:
		return 0, []uint64{24, 48, 72, 104}, true
	case 14:
		return 0, []uint64{24, 48, 72, 96}, true
	case 15:
		return 0, []uint64{8, 32, 56, 80}, true
	}
	return 0, nil, false
}

// ErrGCLists: the GC lists of this interpreter can't be located.
var ErrGCLists = errors.New("can't locate the GC lists")

// GCLists returns the addresses of the main interpreter's GC list heads
// (young to permanent), each checked to be a list head.
func (p *Process) GCLists() ([]uint64, error) {
	l := p.Layout
	if l.FreeThreaded {
		return nil, fmt.Errorf("%w: a free-threaded build keeps no GC lists (objects are found through its heaps)", ErrGCLists)
	}
	gcOff, heads, ok := gcGenerations(l.Version.Minor)
	if !ok {
		return nil, fmt.Errorf("%w: no GC layout for Python %s", ErrGCLists, l.Version)
	}
	if l.Version.Minor >= 13 {
		f, err := p.debugFields()
		if err != nil {
			return nil, fmt.Errorf("%w: debug offsets: %v", ErrGCLists, err)
		}
		gcOff = f["interpreter_state.gc"]
		if gcOff == 0 {
			return nil, fmt.Errorf("%w: debug offsets lack interpreter_state.gc", ErrGCLists)
		}
	}
	interp, err := p.MainInterp()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, len(heads))
	for _, h := range heads {
		a := interp + gcOff + h
		// The lists change while the target runs: a head whose neighbours
		// do not point back is read again before it is called no head.
		var err error
		for attempt := 0; attempt < 20; attempt++ {
			if err = p.gcHead(a); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: 0x%x (interpreter 0x%x + %d + %d): %w", ErrGCLists, a, interp, gcOff, h, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// gcHead checks that a is a GC list head: empty (pointing at itself) or a
// neighbour pointing back at it (the first object, which changes only when
// it is freed or collected, or the last, which every new object replaces).
// A mismatch is ErrGCListChanged: the list may have changed between the
// reads.
func (p *Process) gcHead(a uint64) error {
	var b [16]byte
	if err := p.objs.mem.Read(a, b[:]); err != nil {
		return fmt.Errorf("can't read it: %w", err)
	}
	next, prev := le64(b[:], 0)&^7, le64(b[:], 8)&^7
	if next == a && prev == a {
		return nil
	}
	var nb, pb [16]byte
	if p.objs.mem.Read(next, nb[:]) == nil && le64(nb[:], 8)&^7 == a {
		return nil
	}
	if p.objs.mem.Read(prev, pb[:]) == nil && le64(pb[:], 0)&^7 == a {
		return nil
	}
	return fmt.Errorf("not a list head (its neighbours 0x%x, 0x%x do not point back): %w", next, prev, ErrGCListChanged)
}

// ErrGCListChanged: a GC list did not hold still for a read (or what was
// read is no list).
var ErrGCListChanged = errors.New("GC list changed while it was read")
