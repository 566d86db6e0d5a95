package pyframes

import "fmt"

// The frame model: the version-specific facts about a thread's frame chain
// that every walker of it needs — this user-space one and the in-kernel
// (eBPF) one — kept in one table so both apply the same rules. Offsets stay
// in Layout; this is what the values mean.
//
// A thread's chain runs from its current frame through each frame's
// previous link to NULL. Which frames are on it (KERNEL-WALKER.md §2,
// CPython's Include/internal/pycore_frame.h and pycore_interpframe_structs.h
// at each tag):
//   - owner THREAD: a frame in the thread's data-stack chunks, which grow
//     upwards, so a THREAD frame's THREAD caller in the same chunk lies below it;
//   - owner GENERATOR: a generator's / coroutine's frame, inside its heap
//     object (gen + gi_iframe), anywhere in memory relative to its caller;
//     linked (previous = the frame that resumed it) only while it runs,
//     previous = NULL while it is suspended;
//   - owner ≥ OwnerShim: not Python code (3.12+ entry shims on the C stack,
//     3.14/3.15 interpreter-owned entry and base frames): skipped.
//
// A whole chain ends (previous NULL) at the thread's outermost frame. A chain
// read while the thread resumes or suspends a generator can end early, at a
// generator frame whose previous was NULL at the instant it was read (right
// after a yield; or before the resume linked it; 3.11/3.12 also read a stale
// frame through a _PyCFrame whose current_frame is not set yet). Such a chain
// is missing its callers: End says how to recognise a whole one.

// ChainEnd is how the last frame of a whole chain is recognised.
type ChainEnd uint8

const (
	// EndNotGenerator (3.10): no marker; the last frame must not belong to a
	// generator: f_gen == NULL and its code is not a generator's or
	// coroutine's (co_flags; a finished generator's frame, which its code
	// object keeps as the zombie frame for the next call, has f_gen NULL).
	EndNotGenerator ChainEnd = iota + 1
	// EndEntry (3.11): the last frame was entered from C (is_entry) and is
	// not a generator's (owner != GENERATOR).
	EndEntry
	// EndShim (3.12–3.14): the last frame is the outermost evaluator's entry
	// shim (owner ≥ OwnerShim), whose previous was the NULL current frame.
	EndShim
	// EndBaseFrame (3.15): the last frame is the thread state's base_frame.
	EndBaseFrame
)

func (e ChainEnd) String() string {
	switch e {
	case EndNotGenerator:
		return "a frame that is not a generator's"
	case EndEntry:
		return "an entry frame (is_entry) that is not a generator's"
	case EndShim:
		return "the evaluator's entry shim"
	case EndBaseFrame:
		return "the thread's base frame"
	}
	return "?"
}

// GenStates are the generator frame states (gi_frame_state, 3.10 f_state).
// YieldFrom is 0 where there is no separate state (3.10–3.12: a suspended
// generator's pending yield-from is on its value stack).
type GenStates struct{ Created, Suspended, YieldFrom, Executing, Cleared int8 }

// FrameModel is one minor version's row.
type FrameModel struct {
	Minor int
	// Owner values of _PyInterpreterFrame.Owner (3.11+; 0 on 3.10).
	OwnerThread, OwnerGenerator, OwnerFrameObject uint8
	// OwnerShim: frames whose owner is ≥ this are skipped; 0: no shims.
	OwnerShim uint8
	// OwnerMax: the highest owner value the version uses (3.14: CSTACK 4).
	OwnerMax uint8
	End      ChainEnd
	// FrameGen (3.10): offset of PyFrameObject.f_gen (x86_64); 0 otherwise.
	FrameGen uint64
	// CodeFlags (3.10): offset of the int co_flags in PyCodeObject; 0 otherwise.
	CodeFlags uint64
	States    GenStates
	Source    string
}

// frameModels: one row per supported minor version. Owner enums: 3.11 has
// THREAD 0, GENERATOR 1, FRAME_OBJECT 2 plus a separate is_entry; 3.12/3.13
// add CSTACK 3; 3.14 INTERPRETER 3, CSTACK 4; 3.15 drops CSTACK (entry
// frames are INTERPRETER-owned) and adds tstate->base_frame (gh-138122).
// Frame states: 3.11/3.12 CREATED -2, SUSPENDED -1, EXECUTING 0, COMPLETED 1,
// CLEARED 4; 3.13/3.14 add SUSPENDED_YIELD_FROM -1 (CREATED -3, SUSPENDED -2);
// 3.15 renumbers: CREATED 0, SUSPENDED 1, SUSPENDED_YIELD_FROM 2,
// (YIELD_FROM_LOCKED 3,) EXECUTING 4, CLEARED 5. 3.10's f_state: CREATED -2,
// SUSPENDED -1, EXECUTING 0.
var frameModels = map[int]FrameModel{
	10: {Minor: 10, End: EndNotGenerator, FrameGen: 88, CodeFlags: 36,
		States: GenStates{Created: -2, Suspended: -1, Executing: 0, Cleared: 4},
		Source: "Include/cpython/frameobject.h, Objects/genobject.c @v3.10.13"},
	11: {Minor: 11, OwnerThread: 0, OwnerGenerator: 1, OwnerFrameObject: 2, OwnerMax: 2, End: EndEntry,
		States: GenStates{Created: -2, Suspended: -1, Executing: 0, Cleared: 4},
		Source: "Include/internal/pycore_frame.h @v3.11.7"},
	12: {Minor: 12, OwnerThread: 0, OwnerGenerator: 1, OwnerFrameObject: 2, OwnerShim: 3, OwnerMax: 3, End: EndShim,
		States: GenStates{Created: -2, Suspended: -1, Executing: 0, Cleared: 4},
		Source: "Include/internal/pycore_frame.h @v3.12.1"},
	13: {Minor: 13, OwnerThread: 0, OwnerGenerator: 1, OwnerFrameObject: 2, OwnerShim: 3, OwnerMax: 3, End: EndShim,
		States: GenStates{Created: -3, Suspended: -2, YieldFrom: -1, Executing: 0, Cleared: 4},
		Source: "Include/internal/pycore_frame.h @v3.13.0"},
	14: {Minor: 14, OwnerThread: 0, OwnerGenerator: 1, OwnerFrameObject: 2, OwnerShim: 3, OwnerMax: 4, End: EndShim,
		States: GenStates{Created: -3, Suspended: -2, YieldFrom: -1, Executing: 0, Cleared: 4},
		Source: "Include/internal/pycore_interpframe_structs.h, pycore_frame.h @v3.14"},
	15: {Minor: 15, OwnerThread: 0, OwnerGenerator: 1, OwnerFrameObject: 2, OwnerShim: 3, OwnerMax: 3, End: EndBaseFrame,
		States: GenStates{Created: 0, Suspended: 1, YieldFrom: 2, Executing: 4, Cleared: 5},
		Source: "Include/internal/pycore_interpframe_structs.h, pycore_frame.h @v3.15"},
}

// FrameModelFor returns the row for a CPython 3.minor.
func FrameModelFor(minor int) (FrameModel, bool) {
	m, ok := frameModels[minor]
	return m, ok
}

// ErrIncomplete: a chain read ended (previous NULL) somewhere other than
// the thread's outermost frame — its callers are missing. It is a torn read.
var ErrIncomplete = fmt.Errorf("chain does not reach the thread's outermost frame: %w", ErrTorn)

// LastFrame is what a walker knows of the last frame of a chain (the one
// whose previous is NULL), shims included.
type LastFrame struct {
	Addr  uint64
	Owner uint8  // 3.11+
	Entry bool   // 3.11 is_entry
	Gen   uint64 // 3.10 f_gen
	Code  uint64 // its code object (3.10: the caller checks co_flags, see CodeFlags)
}

// GeneratorCodeFlags: co_flags bits of code that runs in a generator's,
// coroutine's or async generator's frame (CO_GENERATOR, CO_COROUTINE,
// CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR; Include/cpython/code.h).
const GeneratorCodeFlags = 0x20 | 0x80 | 0x100 | 0x200

// Whole reports whether a chain whose last frame is e is whole, for a
// thread whose base frame is base (3.15; 0 when unknown: then any
// interpreter-owned last frame is accepted). On 3.10 the caller also checks
// that e's code is not a generator's (CodeFlags, GeneratorCodeFlags).
func (m FrameModel) Whole(e LastFrame, base uint64) bool {
	switch m.End {
	case EndNotGenerator:
		return e.Gen == 0
	case EndEntry:
		return e.Entry && e.Owner != m.OwnerGenerator
	case EndShim:
		return e.Owner >= m.OwnerShim
	case EndBaseFrame:
		if base != 0 {
			return e.Addr == base
		}
		return e.Owner >= m.OwnerShim
	}
	return true
}
