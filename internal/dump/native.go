package dump

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/mixed"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/ptrace"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/unwind"
)

// DefaultStackSize is the user stack copied per thread by dump
// --native: one copy per thread (not per sample), so it can be larger than
// record's.
const DefaultStackSize = 64 << 10

// NativeInfo is dump --native's account: every thread's registers and
// stack were read while it was stopped, like its Python stack, so a merge
// mismatch is a bug of pyobs (or of its layout knowledge), not a race.
type NativeInfo struct {
	StackSize int `json:"stack_size"`
	Unwound   int `json:"threads_unwound"`
	Full      int `json:"full"`
	Truncated int `json:"truncated"`
	Failed    int `json:"failed"`
	Mismatch  int `json:"merge_mismatches"`
	// PythonUnread: threads whose Python stack could not be read (the
	// thread's error says why): their native stack is shown apart, not
	// merged, and is no mismatch.
	PythonUnread int     `json:"python_unread,omitempty"`
	NoPython     int     `json:"interpreter_frames_without_python"`
	UnwindUS     float64 `json:"unwind_us"`
	KernelNote   string  `json:"kernel,omitempty"`
}

// ThreadNative is one thread's native unwind and how it was glued.
type ThreadNative struct {
	Unwind string `json:"unwind"`         // "full", "truncated" or "failed"
	Stop   string `json:"stop,omitempty"` // why a truncated or failed unwind stopped
	// Merge: "address" (by the C-stack links), "count" (3.10: runs counted
	// against eval frames), "mismatch" (frames holds the Python stack
	// alone, native_frames the native one), "python-unread" (the Python
	// stack could not be read: native_frames alone) or "none" (no
	// registers).
	Merge        string      `json:"merge"`
	NativeFrames []FrameDump `json:"native_frames,omitempty"`
	Error        string      `json:"error,omitempty"`
}

// Frame kinds in a dump --native.
const (
	KindPython = "python"
	KindNative = "native"
	KindMarker = "marker" // [truncated native stack], …
)

// nativeDump holds what was copied of each stopped thread.
type nativeDump struct {
	pid       int
	size      int
	threads   map[int]*natThread // by tid (our namespace)
	spans     []procfs.Mapping   // every mapping, any permission: where a stack ends
	spansErr  error
	interpBin string // the interpreter's binary as mapped
	proc      *unwind.Process
	interp    mixed.Learner
	info      NativeInfo
}

type natThread struct {
	regs  unwind.Regs
	stack unwind.StackCopy
	err   error
}

// prepareNative reads the target's mappings before its threads are
// stopped (to keep the stop short; capture re-reads them if a stack
// pointer lies in none).
func prepareNative(s *session.Session, size int) *nativeDump {
	if size <= 0 {
		size = DefaultStackSize
	}
	n := &nativeDump{pid: s.Pid, size: size, threads: map[int]*natThread{}, info: NativeInfo{StackSize: size}}
	n.spans, n.spansErr = s.FS.Maps(s.Pid)
	n.interpBin = s.Py.Info.Binary
	return n
}

// reset forgets what an earlier stop captured.
func (n *nativeDump) reset() {
	clear(n.threads)
	n.info = NativeInfo{StackSize: n.size}
}

// capture reads the registers and copies the stack of every stopped
// thread: the part from its stack pointer up to size bytes or the end of
// its stack mapping.
func (n *nativeDump) capture(f *ptrace.Frozen) {
	size := n.size
	spans, mapsErr := n.spans, n.spansErr
	reread := false
	mem := pyframes.NewProcessMemory(n.pid)
	defer mem.Close()
	for _, tid := range f.Tids {
		t := &natThread{}
		n.threads[tid] = t
		pr, err := f.Regs(tid)
		if err != nil {
			t.err = err
			continue
		}
		regs, sp, err := nativeRegs(&pr)
		if err != nil {
			t.err = fmt.Errorf("pid %d tid %d: %w", n.pid, tid, err)
			continue
		}
		t.regs = regs
		if mapsErr != nil {
			t.err = mapsErr
			continue
		}
		end := spanEnd(spans, sp)
		if end == 0 && !reread {
			reread = true // a thread (and its stack) newer than the maps read
			if ms, err := procfs.Default().Maps(n.pid); err == nil {
				spans = ms
				end = spanEnd(spans, sp)
			}
		}
		if end == 0 {
			t.err = fmt.Errorf("pid %d tid %d: stack pointer 0x%x in no mapping", n.pid, tid, sp)
			continue
		}
		want := min(uint64(size), end-sp)
		buf := make([]byte, want)
		if err := mem.Read(sp, buf); err != nil {
			// A stack's end is not always a mapping's end: glibc's guard
			// regions (MADV_GUARD_INSTALL) sit inside a mapping, and
			// adjacent thread stacks may share one. Keep what was read.
			var me *pyframes.MemError
			if !errors.As(err, &me) || me.Got < 8 {
				t.err = fmt.Errorf("tid %d: copy the stack at 0x%x: %w", tid, sp, err)
				continue
			}
			buf = buf[:me.Got&^7]
		}
		t.stack = unwind.StackCopy{Base: sp, Data: buf}
	}
	n.proc = unwind.NewProcess(n.pid, unwind.NewCache())
}

// spanEnd is the end of the mapping holding addr, 0 when none does.
func spanEnd(spans []procfs.Mapping, addr uint64) uint64 {
	if m, ok := procfs.Containing(spans, addr); ok {
		return m.End
	}
	return 0
}

// Frame ids in a merge: native frames by their index (leaf first), Python
// frames after them, markers negative.
const (
	idTrunc = -1
	idGone  = -2
)

// glue unwinds tid's copied stack and interleaves its native frames with
// the Python frames read while it was stopped (td.Frames, from frames).
func (n *nativeDump) glue(td *ThreadDump, frames []pyframes.Frame) {
	tn := &ThreadNative{Merge: "none"}
	td.Native = tn
	for i := range td.Frames {
		td.Frames[i].Kind = KindPython
	}
	t := n.threads[td.Tid]
	switch {
	case t == nil:
		tn.Unwind, tn.Error = "failed", fmt.Sprintf("tid %d was not stopped (no kernel thread id, or it started after the freeze)", td.Tid)
		n.info.Failed++
		return
	case t.err != nil:
		tn.Unwind, tn.Error = "failed", t.err.Error()
		n.info.Failed++
		return
	}
	start := time.Now()
	pcs, sps, st, err := n.proc.UnwindSP(t.regs, t.stack, nil, nil)
	n.info.Unwound++
	switch st {
	case unwind.Full:
		tn.Unwind = "full"
		n.info.Full++
	case unwind.Truncated:
		tn.Unwind = "truncated"
		n.info.Truncated++
	default:
		tn.Unwind = "failed"
		n.info.Failed++
	}
	if err != nil {
		tn.Stop = unwind.Reason(err)
		tn.Error = err.Error()
	}
	// Root first, as the merge wants them.
	natf := make([]FrameDump, len(pcs))
	nat := make([]mixed.Native, 0, len(pcs))
	lows := make([]uint64, 0, len(pcs))
	for i := len(pcs) - 1; i >= 0; i-- {
		pc := pcs[i]
		if i > 0 {
			pc-- // a return address: name the call
		}
		sym := n.proc.Symbolize(pc)
		name := strings.TrimSuffix(sym.Name, ".cold")
		f := mixed.Native{ID: i, Known: sym.Known, Eval: sym.Known && (name == "_PyEval_EvalFrameDefault" || name == "PyEval_EvalFrameEx")}
		if !sym.Known && sym.Path != "" && sym.Path == n.interpBin {
			f.InInterp = true // maybe the eval loop of a binary stripped to .dynsym
			f.Func, _ = n.proc.FuncStart(pc)
		}
		nat = append(nat, f)
		lows = append(lows, sps[i])
		natf[i] = nativeFrame(sym)
	}
	if td.Error != "" && !td.Consistent {
		// Nothing to glue to: the thread's error says why its Python
		// stack could not be read.
		tn.Merge = "python-unread"
		tn.NativeFrames = natf
		n.info.PythonUnread++
		n.info.UnwindUS += float64(time.Since(start).Nanoseconds()) / 1e3
		return
	}
	py := make([]mixed.Python, len(frames))
	for j, f := range frames {
		py[j] = mixed.Python{ID: len(pcs) + j, Entry: f.Entry, Link: f.Link}
	}
	var ids []int
	ok, gone := false, 0
	if mixed.Linkable(py) {
		tn.Merge = "address"
		ids, gone, ok = n.interp.Linked(nil, nat, lows, py, st == unwind.Full, idTrunc, idGone)
	} else {
		tn.Merge = "count"
		for i := range nat { // count the learned unnamed eval loops too
			nat[i].Eval = n.interp.IsInterp(nat[i])
		}
		// The thread is stopped: the innermost interpreter frame may be
		// in its prologue or epilogue (3.10: tstate->frame not set yet,
		// or set back to the caller's), without its Python frame; only
		// that one can be.
		ids, gone, ok = mixed.StacksGone(nil, nat, py, st == unwind.Full, idTrunc, idGone, 1)
	}
	n.info.UnwindUS += float64(time.Since(start).Nanoseconds()) / 1e3
	if !ok {
		// Both stacks were read while the thread was stopped: a bug, shown.
		tn.Merge = "mismatch"
		tn.NativeFrames = natf
		n.info.Mismatch++
		return
	}
	n.info.NoPython += gone
	out := make([]FrameDump, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- { // innermost first
		switch id := ids[i]; {
		case id == idTrunc:
			out = append(out, FrameDump{Kind: KindMarker, Function: "[truncated native stack]"})
		case id == idGone:
			// Stopped on its way into or out of the eval loop: no Python frame yet or any more.
			out = append(out, FrameDump{Kind: KindMarker, Function: "[interpreter frame without Python frames]"})
		case id >= len(pcs):
			out = append(out, td.Frames[id-len(pcs)])
		default:
			out = append(out, natf[id])
		}
	}
	td.Frames = out
}

func nativeFrame(s unwind.Symbol) FrameDump {
	f := FrameDump{Kind: KindNative, Function: s.Name, File: s.Path, Offset: s.Off}
	if !s.Known {
		f.Function = "[unknown]"
	}
	return f // (in no mapping: File is empty and Offset the address itself)
}
