package mixed

// Native is one native frame of a stack (root first).
type Native struct {
	ID    int
	Eval  bool   // a named interpreter frame: replaced by the Python frames it runs
	Known bool   // named
	Func  uint64 // an unnamed frame's function (its CFI start, unwind.FuncStart); 0: unknown
	// InInterp: the frame lies in the interpreter's own binary (python or
	// libpython), so an unnamed one may be the eval loop; elsewhere (libc,
	// libffi, an extension) it cannot be.
	InInterp bool
}

// Python is one Python frame of a stack (innermost first).
type Python struct {
	ID    int
	Entry bool   // entered from C: ends a run that one eval frame executes
	Link  uint64 // the entry frame's C-stack link (pyframes.Frame.Link), 0: unknown
}

// Stacks glues Python frames into a native stack by counting. nat is root
// first; py innermost first, where an entry frame starts a run of Python
// frames that one interpreter frame executes (3.11+: a chain up to the next
// entry frame; 3.10: every frame). Each eval frame of nat, root to leaf, is
// replaced by the next run, outermost first. When the native stack is
// incomplete (it lost its root), the outer runs without an eval frame go
// first, then the trunc marker. It reports false, appending nothing, when
// the counts disagree.
func Stacks(dst []int, nat []Native, py []Python, complete bool, trunc int) ([]int, bool) {
	dst, _, ok := StacksGone(dst, nat, py, complete, trunc, 0, 0)
	return dst, ok
}

// StacksGone is Stacks where up to maxGone innermost interpreter frames
// may be without their run: Python frames are pushed and popped at the
// top of the chain, so when nat holds more eval frames than py has runs,
// the runs go to the outermost ones and each innermost one left over —
// its Python frame being entered or left at the sample, or gone before a
// later read — becomes the marker gone; n counts them.
func StacksGone(dst []int, nat []Native, py []Python, complete bool, trunc, gone, maxGone int) (_ []int, n int, _ bool) {
	evals, runs := 0, 0
	for _, f := range nat {
		if f.Eval {
			evals++
		}
	}
	for i := range py {
		if py[i].Entry || i == len(py)-1 {
			runs++
		}
	}
	missing := 0
	switch {
	case evals > runs && evals-runs <= maxGone:
		missing = evals - runs
	case evals > runs || (complete && evals != runs):
		return dst, 0, false
	}
	i := len(py) - 1
	run := func() {
		dst = append(dst, py[i].ID)
		for i--; i >= 0 && !py[i].Entry; i-- {
			dst = append(dst, py[i].ID)
		}
	}
	for k := 0; k < runs-(evals-missing); k++ {
		run()
	}
	if !complete {
		dst = append(dst, trunc)
	}
	e := 0
	for _, f := range nat {
		switch {
		case !f.Eval:
			dst = append(dst, f.ID)
		case e < evals-missing:
			run()
			e++
		default:
			dst = append(dst, gone)
			n++
			e++
		}
	}
	return dst, n, true
}

// Linkable: every run of py has its C-stack link (3.11+ with Links), so
// it can be glued by address rather than by counting.
func Linkable(py []Python) bool {
	if len(py) == 0 || !py[len(py)-1].Entry {
		return false
	}
	for i := range py {
		if py[i].Entry && py[i].Link == 0 {
			return false
		}
	}
	return true
}

// Learner glues by address (Linked) and remembers the unnamed functions
// found to be the interpreter. The zero value is ready; it is not safe for
// concurrent use.
type Learner struct {
	funcs map[uint64]bool
}

// maxLearned bounds the learned functions (an eval loop and its .cold part
// per interpreter binary: a handful).
const maxLearned = 64

// Learned reports how many unnamed functions are known to be the interpreter.
func (l *Learner) Learned() int { return len(l.funcs) }

// IsInterp reports whether f is an interpreter frame: named so, or an
// unnamed frame of a function learned to be the interpreter.
func (l *Learner) IsInterp(f Native) bool {
	return f.Eval || (maybeInterp(f) && f.Func != 0 && l.funcs[f.Func])
}

// maybeInterp: an unnamed frame of the interpreter's binary.
func maybeInterp(f Native) bool { return !f.Known && f.InInterp }

// Linked glues Python frames into a native stack by address: each run of
// py (innermost first; an entry frame ends a run) carries the C-stack
// address of its eval loop's link, which lies inside exactly one native
// interpreter frame — the one whose stack pointer (lows, root first like
// nat) is at or below it and whose caller's is above it. The Python stack
// may be read after the native one (record), so:
//   - a run below the leaf's stack pointer, or inside one of its C frames
//     that cannot be the interpreter (which then returned, with all it
//     called), was entered after the native stack was taken: left out;
//   - innermost interpreter frames without a run returned before the read:
//     each becomes the gone marker (counted in gone);
//   - an unmatched interpreter frame outside of the innermost ones, a run
//     in the root frame of a whole stack, or runs out of address order:
//     false.
//
// An unnamed frame of the interpreter's binary (no symbol: a static
// function of a binary stripped to .dynsym) that holds a run's link is
// that run's interpreter frame: on 3.11+ the link is a local of the eval
// loop. Such a link is evidence of nothing else (not that the frame
// returned). When the whole stack glues, the function (Native.Func) of
// such a frame holding an outer run is learned, so that later frames of it
// are interpreter frames even without a link (their Python frames returned
// before the read: the gone marker). Only outer runs teach: the innermost
// run may have been entered after the sample, in the place of a frame
// that returned, while an outer one was there before and after.
//
// With an incomplete native stack, the runs above its outermost frame go
// first, then trunc.
func (l *Learner) Linked(dst []int, nat []Native, lows []uint64, py []Python, complete bool, trunc, goneID int) ([]int, int, bool) {
	if len(nat) == 0 {
		return dst, 0, false
	}
	// Runs innermost first: [start, end] in py, end the entry frame.
	type run struct{ start, end int }
	var runsBuf [32]run
	runs := runsBuf[:0]
	start := 0
	for i := range py {
		if py[i].Entry {
			if len(runs) > 0 && py[i].Link <= py[runs[len(runs)-1].end].Link {
				return dst, 0, false // links must rise outwards
			}
			runs = append(runs, run{start, i})
			start = i + 1
		}
	}
	var evalBuf [64]bool
	eval := evalBuf[:0]
	if len(nat) > len(evalBuf) {
		eval = make([]bool, 0, len(nat))
	}
	for _, f := range nat {
		eval = append(eval, l.IsInterp(f))
	}
	// Runs entered after the sample: below the sampled stack pointer, or
	// inside a (non-root) named C frame of the sample, which must then
	// have returned before the read, with every frame inside it: cut is
	// the outermost such frame.
	newer, cut := lows[len(lows)-1], len(nat)
	for k := 1; k < len(nat); k++ {
		if eval[k] || maybeInterp(nat[k]) {
			continue // (an unnamed frame of the interpreter may be the eval loop: no evidence)
		}
		for _, x := range runs {
			if l := py[x.end].Link; l >= lows[k] && l < lows[k-1] {
				newer, cut = lows[k-1], k
				break
			}
		}
		if cut == k {
			break
		}
	}
	r := 0
	for r < len(runs) && py[runs[r].end].Link < newer {
		r++
	}
	// Match native frames leaf to root. match[k] is the run of nat[k], -1.
	var matchBuf [64]int
	var teachBuf [64]bool
	var match []int
	var teach []bool
	if len(nat) <= len(matchBuf) {
		match, teach = matchBuf[:0], teachBuf[:len(nat)]
	} else {
		match, teach = make([]int, 0, len(nat)), make([]bool, len(nat))
	}
	for range nat {
		match = append(match, -1)
	}
	gone, matchedInner, learn := 0, false, false
	for k := len(nat) - 1; k >= 0; k-- {
		if k >= cut {
			if eval[k] {
				gone++
			}
			continue
		}
		hi := ^uint64(0)
		if k > 0 {
			hi = lows[k-1]
		}
		in := r < len(runs) && py[runs[r].end].Link < hi
		switch {
		case in && (eval[k] || maybeInterp(nat[k]) && k > 0):
			if !eval[k] && matchedInner {
				teach[k] = true
				learn = true
			}
			match[k], matchedInner = r, true
			r++
		case in && (k > 0 || complete):
			return dst, 0, false // a link in the root frame (or a C frame below the cut)
		case in:
			// Outermost frame of a truncated copy, not an eval frame: the
			// remaining runs are above it.
		case eval[k] && matchedInner:
			return dst, 0, false // an outer interpreter frame lost its run
		case eval[k]:
			gone++
		}
	}
	if r < len(runs) && complete {
		return dst, 0, false // Python frames outside a whole native stack
	}
	if learn {
		for k, f := range nat {
			if teach[k] && f.Func != 0 && len(l.funcs) < maxLearned {
				if l.funcs == nil {
					l.funcs = map[uint64]bool{}
				}
				l.funcs[f.Func] = true
			}
		}
	}
	emit := func(x run) {
		for i := x.end; i >= x.start; i-- {
			dst = append(dst, py[i].ID)
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
		case eval[k]:
			dst = append(dst, goneID)
		default:
			dst = append(dst, f.ID)
		}
	}
	return dst, gone, true
}
