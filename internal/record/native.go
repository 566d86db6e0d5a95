package record

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/unwind"
)

// DefaultStackSize is the user stack copied per sample with --native: deep
// enough for the C frames of nested Python↔C calls (3.11+ keeps Python
// frames off the C stack); a deeper stack ends in [truncated native stack].
const DefaultStackSize = 16384

// native is the --native/--kernel state of a recording.
type native struct {
	user, kernel bool
	format       perfevent.SampleFormat
	proc         *unwind.Process
	ksyms        *unwind.Kallsyms
	slab         []uint64 // pcs of the samples pending in this drain
	sps          []uint64 // each user frame's stack pointer, parallel to slab (0 for kernel pcs)
	pcs          map[uint64]natFrame
	kpcs         map[uint64]int
	stops        map[string]uint64
	full, trunc  uint64
	failed       uint64
	mismatch     uint64
	linked, gone uint64
	kernelNote   string
	// scratch
	nat  []natFrame
	lows []uint64
	py   []pyFrame
}

// nativeSample is one sample's native stack: pcs (leaf first) and kernel
// pcs (leaf first) in the slab.
type nativeSample struct {
	off, n, koff, kn int
	status           unwind.Status
}

type natFrame struct {
	id    int
	eval  bool // an interpreter frame: replaced by the Python frames it runs
	known bool // named: an unnamed frame might be the interpreter's
}

type pyFrame struct {
	id    int
	entry bool
	link  uint64 // Frame.Link of an entry frame
}

func newNative(pid int, user, kernel bool) *native {
	n := &native{user: user, kernel: kernel, pcs: map[uint64]natFrame{}, kpcs: map[uint64]int{}, stops: map[string]uint64{}}
	if user {
		n.proc = unwind.NewProcess(pid, unwind.NewCache())
	}
	if kernel {
		if f, err := os.Open("/proc/kallsyms"); err != nil {
			n.kernelNote = fmt.Sprintf("can't read /proc/kallsyms (%v): kernel frames are unnamed", err)
		} else {
			n.ksyms, err = unwind.ParseKallsyms(f)
			f.Close()
			if err != nil {
				n.kernelNote = fmt.Sprintf("can't parse /proc/kallsyms (%v): kernel frames are unnamed", err)
			} else if n.ksyms.Hidden {
				n.kernelNote = "kernel.kptr_restrict hides /proc/kallsyms addresses: kernel frames are unnamed"
			}
		}
		if n.kernelNote != "" {
			fmt.Fprintln(os.Stderr, "pyobs record:", n.kernelNote)
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
		var err error
		n.slab, n.sps, ns.status, err = n.proc.UnwindSP(regs, unwind.StackCopy{Base: regs.V[unwind.RegRSP], Data: s.Stack}, n.slab, n.sps)
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

// PERF_CONTEXT_* markers in a callchain (include/uapi/linux/perf_event.h).
const (
	perfContextKernel = ^uint64(128) + 1  // -128
	perfContextMax    = ^uint64(4095) + 1 // -4095: markers are >= this
)

// frame interns the native frame at pc (leaf: the sampled pc itself;
// callers: return addresses, named by pc-1).
func (n *native) frame(p *flame.Profile, pc uint64, leaf bool) natFrame {
	if !leaf {
		pc--
	}
	if f, ok := n.pcs[pc]; ok {
		return f
	}
	s := n.proc.Symbolize(pc)
	name := strings.TrimSuffix(s.Name, ".cold")
	f := natFrame{
		id:    p.Intern(flame.Frame{Kind: flame.Native, Function: s.Label(), File: s.Path}),
		eval:  s.Known && (name == "_PyEval_EvalFrameDefault" || name == "PyEval_EvalFrameEx"),
		known: s.Known,
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
func (n *native) stack(p *flame.Profile, ids []int, ns nativeSample, py []pyFrame, marker int) []int {
	if marker >= 0 {
		// No Python stack to merge: the native stack as it is.
		ids = append(ids, marker)
		for i := ns.n - 1; i >= 0 && n.user; i-- {
			ids = append(ids, n.frame(p, n.slab[ns.off+i], i == 0).id)
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
		if linkable(py) {
			goneID := p.Intern(flame.Frame{Kind: flame.State, Function: "[Python frames returned before read]"})
			if ids, gone, ok = mergeLinked(ids, nat, lows, py, complete, trunc, goneID); ok {
				n.linked++
				if gone > 0 {
					n.gone++
				}
			}
		} else {
			ids, ok = mergeStacks(ids, nat, py, complete, trunc)
		}
		if !ok {
			n.mismatch++
			ids = append(ids, p.Intern(flame.Frame{Kind: flame.State, Function: "[merge mismatch]"}))
			for _, f := range nat {
				ids = append(ids, f.id)
			}
			for i := len(py) - 1; i >= 0; i-- {
				ids = append(ids, py[i].id)
			}
		}
	} else {
		for i := len(py) - 1; i >= 0; i-- {
			ids = append(ids, py[i].id)
		}
	}
	for i := ns.kn - 1; i >= 0; i-- {
		ids = append(ids, n.kernelFrame(p, n.slab[ns.koff+i]))
	}
	return ids
}

// mergeStacks glues Python frames into a native stack. nat is root first;
// py innermost first, where an entry frame starts a run of Python frames
// that one interpreter frame executes (3.11+: a chain up to the next entry
// frame; 3.10: every frame). Each eval frame of nat, root to leaf, is
// replaced by the next run, outermost first. When the native stack is
// incomplete (it lost its root), the outer runs without an eval frame go
// first, then the trunc marker. It reports false, appending nothing, when
// the counts disagree.
func mergeStacks(dst []int, nat []natFrame, py []pyFrame, complete bool, trunc int) ([]int, bool) {
	evals, runs := 0, 0
	for _, f := range nat {
		if f.eval {
			evals++
		}
	}
	for i := range py {
		if py[i].entry || i == len(py)-1 {
			runs++
		}
	}
	if evals > runs || (complete && evals != runs) {
		return dst, false
	}
	i := len(py) - 1
	run := func() {
		dst = append(dst, py[i].id)
		for i--; i >= 0 && !py[i].entry; i-- {
			dst = append(dst, py[i].id)
		}
	}
	for k := 0; k < runs-evals; k++ {
		run()
	}
	if !complete {
		dst = append(dst, trunc)
	}
	for _, f := range nat {
		if f.eval {
			run()
		} else {
			dst = append(dst, f.id)
		}
	}
	return dst, true
}

// linkable: every run of py has its C-stack link (3.11+ with Links), so
// it can be glued by address rather than by counting.
func linkable(py []pyFrame) bool {
	if len(py) == 0 || !py[len(py)-1].entry {
		return false
	}
	for i := range py {
		if py[i].entry && py[i].link == 0 {
			return false
		}
	}
	return true
}

// mergeLinked glues Python frames into a native stack by address: each
// run of py (innermost first; an entry frame ends a run) carries the C-stack
// address of its eval loop's link, which lies inside exactly one native
// _PyEval_EvalFrameDefault frame — the one whose stack pointer (lows, root
// first like nat) is at or below it and whose caller's is above it. The
// Python stack is read after the sample, so:
//   - a run below the sampled leaf's stack pointer, or inside one of its C
//     frames (which then returned, with all it called), was entered after
//     the sample: left out;
//   - innermost eval frames without a run returned before the read: each
//     becomes the gone marker (counted in gone);
//   - an unmatched eval frame outside of the innermost ones, a run in the
//     root frame of a whole stack, or runs out of address order: false.
//
// With an incomplete native stack, the runs above its outermost frame go
// first, then trunc.
func mergeLinked(dst []int, nat []natFrame, lows []uint64, py []pyFrame, complete bool, trunc, goneID int) ([]int, int, bool) {
	if len(nat) == 0 {
		return dst, 0, false
	}
	// Runs innermost first: [start, end] in py, end the entry frame.
	type run struct{ start, end int }
	var runsBuf [32]run
	runs := runsBuf[:0]
	start := 0
	for i := range py {
		if py[i].entry {
			if len(runs) > 0 && py[i].link <= py[runs[len(runs)-1].end].link {
				return dst, 0, false // links must rise outwards
			}
			runs = append(runs, run{start, i})
			start = i + 1
		}
	}
	// Runs entered after the sample: below the sampled stack pointer, or
	// inside a (non-root) C frame of the sample, which must then have
	// returned before the read, with every frame inside it: cut is the
	// outermost such frame.
	newer, cut := lows[len(lows)-1], len(nat)
	for k := 1; k < len(nat); k++ {
		if nat[k].eval || !nat[k].known {
			continue // (an unnamed frame may be the interpreter's: no evidence)
		}
		for _, x := range runs {
			if l := py[x.end].link; l >= lows[k] && l < lows[k-1] {
				newer, cut = lows[k-1], k
				break
			}
		}
		if cut == k {
			break
		}
	}
	r := 0
	for r < len(runs) && py[runs[r].end].link < newer {
		r++
	}
	// Match native frames leaf to root. match[k] is the run of nat[k], -1.
	var matchBuf [64]int
	match := matchBuf[:0]
	for range nat {
		match = append(match, -1)
	}
	if len(nat) > len(matchBuf) {
		match = make([]int, len(nat))
		for k := range match {
			match[k] = -1
		}
	}
	gone, matchedInner := 0, false
	for k := len(nat) - 1; k >= 0; k-- {
		if k >= cut {
			if nat[k].eval {
				gone++
			}
			continue
		}
		hi := ^uint64(0)
		if k > 0 {
			hi = lows[k-1]
		}
		in := r < len(runs) && py[runs[r].end].link < hi
		switch {
		case in && nat[k].eval:
			match[k], matchedInner = r, true
			r++
		case in && (k > 0 || complete):
			return dst, 0, false // a link inside an unnamed frame, or the root
		case in:
			// Outermost frame of a truncated copy, not an eval frame: the
			// remaining runs are above it.
		case nat[k].eval && matchedInner:
			return dst, 0, false // an outer interpreter frame lost its run
		case nat[k].eval:
			gone++
		}
	}
	if r < len(runs) && complete {
		return dst, 0, false // Python frames outside a whole native stack
	}
	emit := func(x run) {
		for i := x.end; i >= x.start; i-- {
			dst = append(dst, py[i].id)
		}
	}
	for i := len(runs) - 1; i >= r; i-- {
		emit(runs[i])
	}
	if !complete {
		dst = append(dst, trunc)
	}
	for k, f := range nat {
		switch {
		case match[k] >= 0:
			emit(runs[match[k]])
		case f.eval:
			dst = append(dst, goneID)
		default:
			dst = append(dst, f.id)
		}
	}
	return dst, gone, true
}

// pyFrames interns a Python stack (innermost first) for merging.
func (r *Recorder) pyFrames(frames []pyframes.Frame) []pyFrame {
	out := r.nat.py[:0]
	for _, f := range frames {
		out = append(out, pyFrame{id: r.pyFrameID(f), entry: f.Entry, link: f.Link})
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
	marker := -1
	var py []pyFrame
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
		}
	}
	for _, ns := range natives {
		ids := r.ids[:0]
		if r.opt.Threads {
			if !ok {
				ref = pyframes.ThreadRef{NativeID: tid}
			}
			ids = append(ids, r.threadFrame(ref))
		}
		ids = r.nat.stack(r.prof, ids, ns, py, marker)
		r.prof.AddIDs(ids, 1)
		r.ids = ids
	}
}

func (n *native) finish(m *flame.Meta, stackSize int) {
	if n.user {
		m.NativeFull, m.NativeTruncated, m.NativeFailed, m.MergeMismatch = n.full, n.trunc, n.failed, n.mismatch
		m.MergeLinked, m.MergeGone = n.linked, n.gone
		m.StackUserBytes = stackSize
		if len(n.stops) > 0 {
			m.NativeStops = n.stops
		}
	}
	m.KernelSymbols = n.kernelNote
}

func isTorn(err error) bool { return errors.Is(err, pyframes.ErrTorn) }
