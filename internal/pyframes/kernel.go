package pyframes

import (
	"fmt"
	"sort"
	"time"
)

// KernelLayout is what an in-kernel stack walker (internal/kwalk) needs to
// know about one attached interpreter: the frame-chain offsets of Layout,
// the addresses its checks compare with, and the per-version rules (which
// owners are shims, what a whole chain ends at, how a running generator's
// frame is marked) that Layout leaves to walk.go.
type KernelLayout struct {
	Version Version
	Source  string

	CodeType  uint64 // &PyCode_Type
	FrameType uint64 // &PyFrame_Type (3.10 frames are objects), 0 if not exported
	Interp    uint64 // the main interpreter
	// CodeGenerationAddr: a counter that moves whenever a code object may
	// have been replaced at an address: 3.14+ &interp->_code_object_generation
	// (a u64 bumped when one is freed); 3.12/3.13 the next co_version (a u32
	// bumped when one is created: CodeGenerationCreated, a property of the
	// build); 0 when pyobs can't find it.
	CodeGenerationAddr    uint64
	CodeGenerationCreated bool
	// CodeGenerationWhy says why a 3.12/3.13 build has none ("" otherwise).
	CodeGenerationWhy string

	ObType             uint64
	TstateFrame        uint64 // 3.10 frame, 3.11/3.12 cframe, 3.13+ current_frame
	CFrameCurrentFrame int64  // -1: the tstate field is the frame itself
	CFramePrevious     uint64 // 3.11/3.12: _PyCFrame.previous (an eval loop entering), 0: none
	TstateBaseFrame    uint64 // 3.15: tstate->base_frame, 0 otherwise
	TstateThreadID     uint64 // pthread_t (== the thread's fsbase on x86_64)
	TstateNativeID     uint64 // kernel tid; 0 on 3.10
	// AttachedTLS (HasAttachedTLS; 3.12+): where, from a thread's fsbase,
	// the thread state it is attached to now is (AttachedTLS): while it
	// runs a sub-interpreter, that one's, on top of its bound state's
	// frames. A property of the process (its TLS layout), like the
	// addresses above.
	AttachedTLS    int64
	HasAttachedTLS bool
	// TstateInterp, InterpID: a thread state's interpreter and that one's
	// id (main: 0), so that a sub-interpreter's state found with no
	// caller known is said to miss its callers.
	TstateInterp, InterpID uint64

	FrameObjects  bool // 3.10
	FramePrevious uint64
	FrameCode     uint64
	FrameInstr    uint64 // 3.11+: instruction pointer; 3.10: int f_lasti
	FrameOwner    uint64
	FrameIsEntry  int64 // 3.11; -1 otherwise
	FrameSize     uint64
	CodeTagged    bool
	CodeAdaptive  uint64
	OwnerSkip     uint8 // owners >= this are shims; 0: none
	OwnerMax      uint8 // highest owner value of the version
	// End: what the outermost frame of a whole chain is (the frame model's
	// End, numbered for the kernel: see KernelEnd).
	End uint32
	// GenStateRel: offset of gi_frame_state (int8) relative to a
	// generator's embedded frame; 0: not known (unchecked).
	GenStateRel  int64
	GenExecuting int8
	// FrameGen, CodeFlags (3.10): offsets of f_gen and co_flags, so a chain
	// ending at a generator's frame is known for incomplete; 0 otherwise.
	FrameGen, CodeFlags uint64
}

// The kernel program's numbering of the frame model's chain ends
// (kwalk.bpf.c END_*).
const (
	KernelEndNull  uint32 = iota // 3.10: f_back NULL
	KernelEndEntry               // 3.11: an is_entry frame
	KernelEndShim                // 3.12–3.14: the outermost evaluator's entry shim
	KernelEndBase                // 3.15: tstate->base_frame
)

// KernelEnd numbers a chain end for the kernel program.
func KernelEnd(e ChainEnd) uint32 {
	switch e {
	case EndEntry:
		return KernelEndEntry
	case EndShim:
		return KernelEndShim
	case EndBaseFrame:
		return KernelEndBase
	}
	return KernelEndNull
}

// KernelLayout derives the in-kernel walker's layout from the attached
// interpreter: Layout's offsets, plus (3.14+) the debug-offsets fields
// Layout does not keep, read again from _PyRuntime.
func (p *Process) KernelLayout() (*KernelLayout, error) {
	l, r := p.Layout, &p.objs
	if l.FreeThreaded && l.FrameTLBCIndex != 0 {
		// 3.14t+: a thread may run its own copy of a code object's
		// bytecode (tlbc_index): the kernel computes offsets from
		// co_code_adaptive only. (3.13t has no such copies; its bigger
		// object header is in ObType and the code offsets.) Callers fall
		// back to the user-space walker.
		return nil, fmt.Errorf("pid %d: python %s is a free-threaded build with thread-local bytecode: the in-kernel walker does not read it (the user-space walker does)", p.Pid, l.Version)
	}
	k := &KernelLayout{
		Version: l.Version, Source: l.Source,
		CodeType: r.types.code, FrameType: r.types.frame,
		ObType: l.ObType, TstateFrame: l.TstateFrame, CFrameCurrentFrame: l.CFrameCurrentFrame,
		CFramePrevious: l.CFramePrevious, TstateThreadID: l.TstateThreadID, TstateNativeID: l.TstateNativeThreadID,
		FrameObjects: l.FrameObjects, FramePrevious: l.FramePrevious, FrameCode: l.FrameCode,
		FrameInstr: l.FrameInstr, FrameOwner: l.FrameOwner, FrameIsEntry: l.FrameIsEntry,
		FrameSize: l.FrameSize, CodeTagged: l.CodeTagged, CodeAdaptive: l.CodeAdaptive,
		OwnerSkip: l.FrameOwnerSkip, TstateInterp: l.TstateInterp, InterpID: l.InterpID,
	}
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't read the interpreter list at 0x%x: %w", p.Pid, p.Info.Runtime+l.RuntimeInterpretersHead, err)
	}
	// The list's head is the newest interpreter: the main one (id 0) is
	// found along it, at its tail, and the code-object generation is read
	// from it. Not found: Interp stays 0 (the kernel walk then looks every
	// thread state up in its map), and the head stands in for the
	// generation.
	for at, i := interp, 0; l.InterpID != 0 && at != 0 && i < 256; i++ {
		id, err := r.u64(at + l.InterpID)
		if err != nil {
			break
		}
		if id == 0 {
			k.Interp = at
			break
		}
		if at, err = r.u64(at + l.InterpNext); err != nil {
			break
		}
	}
	if k.Interp != 0 {
		interp = k.Interp
	}
	// Best effort: without it a thread running a sub-interpreter is
	// walked in its bound (calling) interpreter's frames alone.
	k.AttachedTLS, k.HasAttachedTLS, _ = p.AttachedTLS()
	// Owner values and the generator's FRAME_EXECUTING, per version
	// (Include/internal/pycore_frame.h, pycore_interpframe_structs.h;
	// ../shared/KERNEL-WALKER.md §2). gi_frame_state sits 5 bytes before
	// the embedded frame in 3.11–3.13 (checked live); 3.14+ publish it.
	m, ok := FrameModelFor(l.Version.Minor)
	if !ok {
		return nil, &UnsupportedVersionError{Version: l.Version, Why: "no frame model"}
	}
	k.End, k.OwnerMax, k.GenExecuting = KernelEnd(m.End), m.OwnerMax, m.States.Executing
	k.FrameGen, k.CodeFlags = m.FrameGen, m.CodeFlags
	if v := l.Version.Minor; v >= 11 && v <= 13 {
		k.GenStateRel = -5
	}
	if v := l.Version.Minor; v == 12 || v == 13 {
		// A property of the build (the kernel reads a u32), whether or not
		// this process's counter was found.
		k.CodeGenerationCreated = l.CodeVersion != 0
		k.CodeGenerationAddr, k.CodeGenerationWhy = p.nextCodeVersionAddr(interp)
	}
	if l.Version.Minor >= 14 {
		d, err := p.debugOffsets()
		if err != nil {
			return nil, err
		}
		f := d.Fields
		if off := f["interpreter_state.code_object_generation"]; off != 0 {
			k.CodeGenerationAddr = interp + off
		}
		if fi, fs := f["gen_object.gi_iframe"], f["gen_object.gi_frame_state"]; fi != 0 && fs != 0 {
			k.GenStateRel = int64(fs) - int64(fi)
		}
		k.TstateBaseFrame = f["thread_state.base_frame"]
		if k.End == KernelEndBase && k.TstateBaseFrame == 0 {
			return nil, fmt.Errorf("pid %d: python %s publishes no thread_state.base_frame: can't tell a whole stack", p.Pid, l.Version)
		}
	}
	return k, nil
}

func (p *Process) debugOffsets() (*DebugOffsets, error) {
	n := DebugTableSize(p.Layout.Version.Minor)
	if n == 0 {
		return nil, &UnsupportedVersionError{Version: p.Layout.Version, Why: "no known debug-offsets layout"}
	}
	tbl := make([]byte, n)
	if err := p.objs.mem.Read(p.Info.Runtime, tbl); err != nil {
		return nil, fmt.Errorf("pid %d: can't read debug offsets at 0x%x: %w", p.Pid, p.Info.Runtime, err)
	}
	return ParseDebugOffsets(tbl)
}

// CodeSymbol is a code object as symbolization needs it.
type CodeSymbol struct {
	Function  string // co_qualname (co_name on 3.10)
	File      string
	FirstLine int
	// ID is unique to the code object as read (a new one when its address
	// is reused by another object).
	ID uint64
	// Version is its co_version (3.12/3.13: a serial from the counter
	// KernelLayout.CodeGenerationAddr points at); 0: none.
	Version uint32

	ci        *codeInfo
	frameObjs bool
}

// Code reads the code object at addr: its header is always re-read and
// compared with the cached one (type, name, file, line table pointers and
// first line), so a reused address is read afresh.
func (p *Process) Code(addr uint64) (*CodeSymbol, error) {
	ci, err := p.code(addr)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", p.Pid, err)
	}
	return &CodeSymbol{Function: ci.name, File: ci.file, FirstLine: ci.firstLine, ID: ci.serial, Version: ci.key.version,
		ci: ci, frameObjs: p.Layout.FrameObjects}, nil
}

// Line maps an instruction offset to its source line: on 3.11+ lasti
// counts code units from co_code_adaptive (-1, a frame not yet started,
// is its first instruction); on 3.10 it is f_lasti.
func (c *CodeSymbol) Line(lasti int) int {
	if c.frameObjs {
		return c.ci.line310(lasti * 2)
	}
	return c.ci.line(max(lasti, 0))
}

// tlsWindow is how far below and above a thread's fsbase TLSOffsets
// looks: static TLS blocks sit just below it, glibc's struct pthread (with
// the pthread_getspecific slots) above it.
const tlsWindow = 4096

// TLSOffsets finds where, relative to a thread's fsbase (== its pthread_t,
// PyThreadState.thread_id, on x86_64 glibc and musl), the runtime keeps the
// pointer to the thread's own thread state: the pthread TSD slot of
// autoTSSkey (3.10–3.14, set for the thread's whole life) or a static TLS
// variable (_Py_tss_gilstate 3.15; _Py_tss_tstate 3.12+, set only while the
// thread is attached). It reads the memory around every thread's fsbase and
// lets the threads vote (tlsVote). None (nil, nil) when they do not agree,
// e.g. a dlopen'ed libpython whose TLS blocks are allocated per thread; an
// in-kernel reader then relies on user space's tid map alone. A wrong offset
// costs the kernel one read: it checks every candidate against the thread
// (thread_id == fsbase, native_thread_id == tid) before it uses it.
func (p *Process) TLSOffsets() ([]int64, error) {
	// The thread list is read while threads come and go: a torn read
	// (freed thread states, no main thread in it) is tried again, since the
	// answer stands for the whole recording.
	var offs []int64
	var err error
	for try := 0; try < 5; try++ {
		var settled bool
		if offs, settled, err = p.tlsOffsets(); settled {
			return offs, nil
		}
		time.Sleep(time.Millisecond)
	}
	return offs, err
}

// tlsOffsets is one try of TLSOffsets; settled when the main thread was
// read and voted.
func (p *Process) tlsOffsets() ([]int64, bool, error) {
	refs, err := p.ThreadRefs()
	if err != nil {
		return nil, false, err
	}
	main := mainThreadRef(refs, p.Pid)
	var mainView []int64
	var others [][]int64
	mainRead := false
	buf := make([]byte, 2*tlsWindow)
	for i, r := range refs {
		if r.ThreadID < tlsWindow || r.Addr == 0 {
			continue // not yet bound to an OS thread
		}
		if !readPages(p.objs.mem, r.ThreadID-tlsWindow, buf) {
			continue // a thread that just ended: the others decide
		}
		if v := ownOffsets(buf, r.Addr); i == main {
			mainView, mainRead = v, true
		} else {
			others = append(others, v)
		}
	}
	offs := tlsVote(mainView, main >= 0, others)
	return offs, mainRead && len(offs) > 0, nil
}

// mainThreadRef is the index of the main thread's reference: the one whose
// native id is the pid, or (3.10, no native id) the main interpreter's
// oldest thread state, last in its list. -1: none.
func mainThreadRef(refs []ThreadRef, pid int) int {
	last := -1
	for i, r := range refs {
		if r.NativeID != 0 {
			if r.NativeID == pid {
				return i
			}
			continue
		}
		if r.Interp == 0 {
			last = i
		}
	}
	return last
}

// readPages reads buf from addr page by page, zeroing the pages that
// cannot be read: the window around a spawned thread's fsbase ends in the
// next mapping (often a guard page) a little above its struct pthread. It
// says whether any page was read.
func readPages(mem Memory, addr uint64, buf []byte) bool {
	const page = 4096
	ok := false
	for off := 0; off < len(buf); {
		end := min(len(buf), off+int(page-(addr+uint64(off))%page))
		if err := mem.Read(addr+uint64(off), buf[off:end]); err != nil {
			clear(buf[off:end])
		} else {
			ok = true
		}
		off = end
	}
	return ok
}

// ownOffsets lists the 8-aligned offsets from fsbase (buf starts tlsWindow
// below it) that hold addr.
func ownOffsets(buf []byte, addr uint64) []int64 {
	var out []int64
	for o := 0; o+8 <= len(buf); o += 8 {
		if le64(buf, uint64(o)) == addr {
			out = append(out, int64(o)-tlsWindow)
		}
	}
	return out
}

// tlsVote picks the offsets of a thread's own thread-state pointer from
// each thread's list of offsets holding it, nearest to fsbase first.
//
// Neither unanimity nor a majority will do. Below a spawned thread's fsbase
// lies its own stack, and threads running the same code (being born, being
// torn down) hold copies of their thread state at the same stack offsets; a
// thread being born has its thread_id before its slot, one being torn down
// loses the slot before it leaves the list, and a thread-per-request server
// always has some of both (a unanimous vote once left the kernel walker
// without TLS for a whole recording). The main thread's thread control
// block is not on a stack, so its offsets are the candidates (hasMain), and
// the other threads rank them: those most of them share are kept. Without
// a main thread, an offset is kept only when at least half the threads
// hold it and no other offset is held as often.
func tlsVote(mainView []int64, hasMain bool, others [][]int64) []int64 {
	votes := map[int64]int{}
	for _, v := range others {
		for _, o := range v {
			votes[o]++
		}
	}
	var out []int64
	if hasMain {
		best := -1
		for _, o := range mainView {
			best = max(best, votes[o])
		}
		for _, o := range mainView {
			if votes[o] == best {
				out = append(out, o)
			}
		}
	} else {
		best := 0
		for _, n := range votes {
			best = max(best, n)
		}
		if best == 0 || 2*best < len(others) {
			return nil
		}
		for o, n := range votes {
			if n == best {
				out = append(out, o)
			}
		}
		if len(out) > 1 {
			return nil // stack copies as common as the slot: no telling
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if abs64(out[i]) != abs64(out[j]) {
			return abs64(out[i]) < abs64(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
