package record

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/mixed"
	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/unwind"
)

// evalLoop is the interpreter's eval loop, whose native frames run the
// Python frames.
const evalLoop = "_PyEval_EvalFrameDefault"

// transitLabel stands, at the sample's instant (bpf engine), for an
// innermost interpreter frame whose Python frame is being entered or
// left: it is on the native stack, not (or no longer) on the chain.
const transitLabel = "[Python frame entering or leaving]"

// BPFMaxStackSize is the most user stack the bpf engine copies per
// sample (natcopy.h NAT_STACK).
const BPFMaxStackSize = 16384

// DefaultStackSize is the user stack copied per sample with --native: deep
// enough for the C frames of nested Python↔C calls (3.11+ keeps Python
// frames off the C stack); a deeper stack ends in [truncated native stack].
const DefaultStackSize = 16384

// native is the --native/--kernel state of a recording.
type native struct {
	user, kernel bool
	proc         *unwind.Process
	ksyms        *procfs.Kallsyms
	slab         []uint64 // pcs of the samples pending in this drain
	sps          []uint64 // each user frame's stack pointer, parallel to slab (0 for kernel pcs)
	pcs          map[uint64]mixed.Native
	interp       mixed.Learner // unnamed functions found to be the eval loop
	interpBin    string        // the interpreter's binary as mapped (python or libpython)
	sawLinks     bool          // some Python stack came with its links: the version has them
	kpcs         map[uint64]int
	stops        map[string]uint64
	full, trunc  uint64
	failed       uint64
	mismatch     uint64
	linked, gone uint64
	// instant (bpf engine): the Python stack is of the sample's instant, so
	// an innermost interpreter frame without its run is a call being
	// entered or left (counted in transit), not a mismatch.
	instant          bool
	counted, transit uint64
	kernelNote       string
	// scratch
	nat  []mixed.Native
	lows []uint64
	py   []mixed.Python
}

// nativeSample is one sample's native stack: pcs (leaf first) and kernel
// pcs (leaf first) in the slab.
type nativeSample struct {
	off, n, koff, kn int
	status           unwind.Status
}

func newNative(pid int, user, kernel bool) *native {
	n := &native{user: user, kernel: kernel, pcs: map[uint64]mixed.Native{}, kpcs: map[uint64]int{}, stops: map[string]uint64{}}
	if user {
		n.proc = unwind.NewProcess(pid, unwind.NewCache())
	}
	if kernel {
		// The note reaches the user through the profile (Meta.KernelSymbols);
		// the command prints it.
		var err error
		n.ksyms, err = procfs.Default().Kallsyms()
		var ke *procfs.KallsymsError
		switch {
		case errors.As(err, &ke) && ke.Parse:
			n.kernelNote = fmt.Sprintf("can't parse %s (%v): kernel frames are unnamed", ke.Path, ke.Err)
		case errors.As(err, &ke):
			n.kernelNote = fmt.Sprintf("can't read %s (%v): kernel frames are unnamed", ke.Path, ke.Err)
		case err != nil:
			n.kernelNote = fmt.Sprintf("%v: kernel frames are unnamed", err)
		case n.ksyms.Hidden:
			n.kernelNote = "kernel.kptr_restrict hides " + n.ksyms.Path + " addresses: kernel frames are unnamed"
		}
	}
	return n
}

// perf register number → DWARF register number.
var dwarfOfPerf = [...]struct{ perf, dwarf int }{
	{perfevent.RegAX, unwind.RegRAX}, {perfevent.RegDX, unwind.RegRDX}, {perfevent.RegCX, unwind.RegRCX},
	{perfevent.RegBX, unwind.RegRBX}, {perfevent.RegSI, unwind.RegRSI}, {perfevent.RegDI, unwind.RegRDI},
	{perfevent.RegBP, unwind.RegRBP}, {perfevent.RegSP, unwind.RegRSP}, {perfevent.RegIP, unwind.RegRA},
}

// capture unwinds one sample now (its stack copy lives only as long as the
// ring record) and keeps its pcs for when the thread's Python stack is read.
func (n *native) capture(s *perfevent.Sample) nativeSample {
	ns := nativeSample{off: len(n.slab)}
	if n.user {
		var regs unwind.Regs
		if s.RegsABI != 0 {
			for _, m := range dwarfOfPerf {
				regs.Set(m.dwarf, s.Regs[m.perf])
			}
			for i := 0; i < 8; i++ {
				regs.Set(unwind.RegR8+i, s.Regs[perfevent.RegR8+i])
			}
		}
		n.unwind(&ns, regs, unwind.StackCopy{Base: regs.V[unwind.RegRSP], Data: s.Stack})
	}
	ns.koff = len(n.slab)
	if n.kernel {
		kernel := false
		for _, ip := range s.Callchain {
			if ip >= perfContextMax {
				kernel = ip == perfContextKernel
				continue
			}
			if kernel {
				n.slab = append(n.slab, ip)
			}
		}
	}
	ns.kn = len(n.slab) - ns.koff
	for len(n.sps) < len(n.slab) {
		n.sps = append(n.sps, 0)
	}
	return ns
}

// unwind appends one stack copy's pcs to the slab under ns, and counts
// how far it went.
func (n *native) unwind(ns *nativeSample, regs unwind.Regs, copy unwind.StackCopy) {
	var err error
	n.slab, n.sps, ns.status, err = n.proc.UnwindSP(regs, copy, n.slab, n.sps)
	ns.n = len(n.slab) - ns.off
	switch ns.status {
	case unwind.Full:
		n.full++
	case unwind.Truncated:
		n.trunc++
	default:
		n.failed++
	}
	if err != nil {
		n.stops[unwind.Reason(err)]++
	}
}

// captureCopy unwinds one copy the kernel walker took with its sample
// (kwalk NativeBytes) into a slab of its own: the sample is folded at once.
func (n *native) captureCopy(regs unwind.Regs, copy unwind.StackCopy) nativeSample {
	n.slab, n.sps = n.slab[:0], n.sps[:0]
	ns := nativeSample{}
	n.unwind(&ns, regs, copy)
	ns.koff = len(n.slab)
	return ns
}

// PERF_CONTEXT_* markers in a callchain (include/uapi/linux/perf_event.h).
const (
	perfContextKernel = ^uint64(128) + 1  // -128
	perfContextMax    = ^uint64(4095) + 1 // -4095: markers are >= this
)

// frame interns the native frame at pc (leaf: the sampled pc itself;
// callers: return addresses, named by pc-1).
func (n *native) frame(p *flame.Profile, pc uint64, leaf bool) mixed.Native {
	if !leaf {
		pc--
	}
	if f, ok := n.pcs[pc]; ok {
		return f
	}
	s := n.proc.Symbolize(pc)
	name := strings.TrimSuffix(s.Name, ".cold")
	f := mixed.Native{
		ID:    p.Intern(flame.Frame{Kind: flame.Native, Function: s.Label(), File: s.Path}),
		Eval:  s.Known && (name == evalLoop || name == "PyEval_EvalFrameEx"),
		Known: s.Known,
	}
	if !s.Known && s.Path != "" && s.Path == n.interpBin {
		// An unnamed function of the interpreter may be its eval loop (a
		// static binary stripped to .dynsym): learned from the links.
		f.InInterp = true
		f.Func, _ = n.proc.FuncStart(pc)
	}
	n.pcs[pc] = f
	return f
}

func (n *native) kernelFrame(p *flame.Profile, pc uint64) int {
	if id, ok := n.kpcs[pc]; ok {
		return id
	}
	name := ""
	if n.ksyms != nil {
		name, _ = n.ksyms.Lookup(pc)
	}
	if name == "" {
		name = fmt.Sprintf("[unknown] (0x%x)", pc)
	}
	id := p.Intern(flame.Frame{Kind: flame.Kernel, Function: name})
	n.kpcs[pc] = id
	return id
}

// stack appends one sample's folded stack, root first, to ids: native
// frames with each interpreter frame replaced by its Python frames (py,
// innermost first), then the kernel frames. marker (a frame id, or -1)
// says why the Python stack is missing.
func (n *native) stack(p *flame.Profile, ids []int, ns nativeSample, py []mixed.Python, marker int) []int {
	if marker >= 0 {
		// No Python stack to merge: the native stack as it is.
		ids = append(ids, marker)
		for i := ns.n - 1; i >= 0 && n.user; i-- {
			ids = append(ids, n.frame(p, n.slab[ns.off+i], i == 0).ID)
		}
	} else if n.user {
		nat, lows := n.nat[:0], n.lows[:0]
		for i := ns.n - 1; i >= 0; i-- {
			nat = append(nat, n.frame(p, n.slab[ns.off+i], i == 0))
			lows = append(lows, n.sps[ns.off+i])
		}
		n.nat, n.lows = nat, lows
		complete := ns.status == unwind.Full
		ok, gone := false, 0
		trunc := p.Intern(flame.Frame{Kind: flame.State, Function: "[truncated native stack]"})
		if mixed.Linkable(py) {
			goneID := p.Intern(flame.Frame{Kind: flame.State, Function: "[Python frames returned before read]"})
			if n.instant {
				goneID = p.Intern(flame.Frame{Kind: flame.State, Function: transitLabel})
			}
			if ids, gone, ok = n.interp.Linked(ids, nat, lows, py, complete, trunc, goneID); ok {
				n.linked++
				switch {
				case gone > 0 && n.instant:
					n.transit++
				case gone > 0:
					n.gone++
				}
			}
		} else {
			for i := range nat { // count the learned unnamed eval loops too
				nat[i].Eval = n.interp.IsInterp(nat[i])
			}
			if n.instant {
				transit := p.Intern(flame.Frame{Kind: flame.State, Function: transitLabel})
				if ids, gone, ok = mixed.StacksGone(ids, nat, py, complete, trunc, transit, len(nat)); ok {
					n.counted++
					if gone > 0 {
						n.transit++
					}
				}
			} else {
				ids, ok = mixed.Stacks(ids, nat, py, complete, trunc)
			}
		}
		if !ok {
			n.mismatch++
			ids = append(ids, p.Intern(flame.Frame{Kind: flame.State, Function: "[merge mismatch]"}))
			for _, f := range nat {
				ids = append(ids, f.ID)
			}
			for i := len(py) - 1; i >= 0; i-- {
				ids = append(ids, py[i].ID)
			}
		}
	} else {
		for i := len(py) - 1; i >= 0; i-- {
			ids = append(ids, py[i].ID)
		}
	}
	for i := ns.kn - 1; i >= 0; i-- {
		ids = append(ids, n.kernelFrame(p, n.slab[ns.koff+i]))
	}
	return ids
}

// pyFrames interns a Python stack (innermost first) for merging.
func (r *Recorder) pyFrames(frames []pyframes.Frame) []mixed.Python {
	out := r.nat.py[:0]
	for _, f := range frames {
		out = append(out, mixed.Python{ID: r.pyFrameID(f), Entry: f.Entry, Link: f.Link})
	}
	r.nat.py = out
	return out
}

func (r *Recorder) pyFrameID(f pyframes.Frame) int {
	k := [2]uint64{f.CodeID, uint64(f.Line)}
	id, ok := r.frameIDs[k]
	if !ok {
		id = r.prof.Intern(flame.Frame{Kind: flame.Python, Function: f.Function, File: f.File, Line: f.Line})
		r.frameIDs[k] = id
	}
	return id
}

// sampleNative folds the native samples of tid taken since its last read,
// each with its own native stack, around one read of its Python stack.
func (r *Recorder) sampleNative(tid int, natives []nativeSample, late bool) {
	w := uint64(len(natives))
	r.samples += w
	r.nat.interpBin = r.s.Py.Info.Binary
	marker := -1
	var py []mixed.Python
	ref, ok := r.tids.Lookup(tid)
	switch {
	case late:
		r.late += w
		marker = r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[late read]"})
	case !ok:
		marker = r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python thread state]"})
	default:
		r.reads++
		frames, consistent, snapshot, err := r.s.Py.Stack(ref.Addr, pyframes.Options{Retries: 1, Snapshot: true, Reuse: true, Links: r.nat.user})
		if snapshot {
			r.moved += w
			consistent = true
		}
		switch {
		case err != nil && !isTorn(err):
			r.failed += w
			marker = r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[unreadable]"})
		case !consistent:
			r.torn += w
			marker = r.prof.Intern(flame.Frame{Kind: flame.State, Function: "[torn read]"})
		default:
			py = r.pyFrames(frames)
			if r.nat.user && r.nat.sawLinks && !mixed.Linkable(py) {
				// 3.11's _PyCFrame chain moved under the read (no links):
				// one more read, rather than a merge by count that fails
				// whenever a run was entered or left meanwhile.
				f2, c2, s2, err2 := r.s.Py.Stack(ref.Addr, pyframes.Options{Retries: 1, Snapshot: true, Reuse: true, Links: true})
				if err2 == nil && (c2 || s2) {
					py = r.pyFrames(f2)
				}
			}
			if mixed.Linkable(py) {
				r.nat.sawLinks = true
			}
		}
	}
	for _, ns := range natives {
		ids := r.ids[:0]
		if r.opt.Threads {
			ids = append(ids, r.threadFrame(tid))
		}
		ids = r.nat.stack(r.prof, ids, ns, py, marker)
		r.prof.AddIDs(ids, 1)
		r.ids = ids
	}
}

func (n *native) finish(meta *flame.Meta, stackSize int) {
	if !n.user && n.kernelNote == "" {
		return
	}
	m := meta.MixedMeta()
	if n.user {
		m.NativeFull, m.NativeTruncated, m.NativeFailed, m.MergeMismatch = n.full, n.trunc, n.failed, n.mismatch
		m.MergeLinked, m.MergeGone = n.linked, n.gone
		m.MergeCounted, m.MergeTransit = n.counted, n.transit
		m.StackUserBytes = stackSize
		if len(n.stops) > 0 {
			m.NativeStops = n.stops
		}
	}
	m.KernelSymbols = n.kernelNote
}

func isTorn(err error) bool { return errors.Is(err, pyframes.ErrTorn) }
