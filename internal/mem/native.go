package mem

import (
	"strings"

	"github.com/pyobs/pyobs/internal/mixed"
)

// Frame kinds (Frame.Kind): a Python frame has none.
const (
	KindNative = "native" // a native function (probe --native)
	KindMarker = "marker" // a note in place of frames that could not be had
)

// NativeStats is the account of --native (probe engine): the stack copies
// the kernel sent, how far each unwound and how each merged.
type NativeStats struct {
	StackBytes int    `json:"stack_bytes"` // user stack copied per kept call, at most
	Copies     uint64 `json:"copies"`      // kept calls whose stack was copied and sent
	Lost       uint64 `json:"lost"`        // the ring was full: kept calls without a native stack
	MeanBytes  uint64 `json:"mean_copied_bytes"`
	Unwound    uint64 `json:"unwound"`
	Full       uint64 `json:"full"`      // to the outermost frame
	Truncated  uint64 `json:"truncated"` // the copy ended first
	Failed     uint64 `json:"failed"`    // a frame without mapping or CFI
	// Stops: why the unwinds that did not reach the outermost frame stopped.
	Stops     map[string]uint64 `json:"stops,omitempty"`
	Undecoded uint64            `json:"undecoded,omitempty"` // records that could not be read
	Forgotten uint64            `json:"forgotten,omitempty"` // copies past the id table's bound: their allocations without native frames
	// Merges of live sites' stacks: glued (each eval-loop frame replaced by
	// the Python frames it runs), or mismatched (the counts disagree: both
	// stacks shown side by side after a marker).
	Merged   uint64 `json:"merged"`
	Mismatch uint64 `json:"mismatch,omitempty"`
}

// natFrame is one native frame of a copied stack.
type natFrame struct {
	label, path string
	eval        bool // the interpreter's eval loop: replaced by the Python frames it runs
}

// natStack is one distinct unwound native stack, leaf first.
type natStack struct {
	frames   []natFrame
	complete bool   // the unwind reached the outermost frame
	stop     string // why not (unwind.Reason)
}

// natStacks holds the unwound stacks and which copy id has which.
type natStacks struct {
	stacks []natStack
	byKey  map[string]int
	byID   map[uint64]int
	stats  NativeStats
}

// maxNatIDs bounds the copy ids remembered (one per kept call).
const maxNatIDs = 1 << 21

func newNatStacks(bytes int) *natStacks {
	return &natStacks{byKey: map[string]int{}, byID: map[uint64]int{}, stats: NativeStats{StackBytes: bytes}}
}

// Indexes of a live allocation's native stack besides real ones.
const (
	natNone        = -1 // no copy was made (not kept with a copy, or the ring was full)
	natNotReceived = -2 // a copy id user space never read
)

// lookup is the stack index of a copy id.
func (n *natStacks) lookup(id uint64) int {
	if id == 0 {
		return natNone
	}
	if i, ok := n.byID[id]; ok {
		return i
	}
	return natNotReceived
}

// add records copy id's unwound stack (deduplicated by its frames).
func (n *natStacks) add(id uint64, st natStack) {
	var b strings.Builder
	for _, f := range st.frames {
		b.WriteString(f.label)
		b.WriteByte(0)
		b.WriteString(f.path)
		b.WriteByte(1)
	}
	if !st.complete {
		b.WriteString("!" + st.stop)
	}
	k := b.String()
	i, ok := n.byKey[k]
	if !ok {
		i = len(n.stacks)
		n.stacks = append(n.stacks, st)
		n.byKey[k] = i
	}
	if len(n.byID) >= maxNatIDs {
		n.stats.Forgotten++
		return
	}
	n.byID[id] = i
}

// merge is a site's stack, innermost first: the native stack (leaf first)
// with each eval-loop frame replaced by the run of Python frames it
// executes (py innermost first, Entry ending a run), by counting
// (mixed.Stacks: the kernel's walk carries no C-stack links). An
// incomplete native stack keeps a marker saying why where its lost callers
// were, under the outer Python frames no native frame holds; a merge whose
// counts disagree shows both stacks after a marker. Never a guess.
func (n *natStacks) merge(py []Frame, idx int) []Frame {
	var ns *natStack
	switch {
	case idx >= 0 && idx < len(n.stacks):
		ns = &n.stacks[idx]
	case idx == natNotReceived:
		return append(append([]Frame{}, py...), Frame{Function: "[native stack not received]", Kind: KindMarker})
	default:
		return append(append([]Frame{}, py...), Frame{Function: "[no native stack copied]", Kind: KindMarker})
	}
	natF := func(f natFrame) Frame { return Frame{Function: f.label, File: f.path, Kind: KindNative} }
	incomplete := Frame{Function: "[native stack incomplete: " + ns.stop + "]", Kind: KindMarker}
	if len(py) == 0 {
		out := make([]Frame, 0, len(ns.frames)+2)
		for _, f := range ns.frames {
			out = append(out, natF(f))
		}
		if !ns.complete {
			out = append(out, incomplete)
		}
		return append(out, Frame{Function: "[no Python stack]", Kind: KindMarker})
	}
	// Ids: native frames 0..len-1 (root first), Python len.. (innermost first).
	nn := len(ns.frames)
	nat := make([]mixed.Native, nn)
	for i := range nat {
		f := ns.frames[nn-1-i]
		nat[i] = mixed.Native{ID: nn - 1 - i, Eval: f.eval, Known: true}
	}
	mpy := make([]mixed.Python, len(py))
	for j, f := range py {
		mpy[j] = mixed.Python{ID: nn + j, Entry: f.Entry}
	}
	const truncID = -1
	ids, ok := mixed.Stacks(nil, nat, mpy, ns.complete, truncID)
	if !ok {
		n.stats.Mismatch++
		out := make([]Frame, 0, nn+len(py)+1)
		for _, f := range ns.frames {
			out = append(out, natF(f))
		}
		out = append(out, py...)
		return append(out, Frame{Function: "[merge mismatch: native and Python stacks shown apart]", Kind: KindMarker})
	}
	n.stats.Merged++
	out := make([]Frame, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- {
		switch id := ids[i]; {
		case id == truncID:
			out = append(out, incomplete)
		case id >= nn:
			out = append(out, py[id-nn])
		default:
			out = append(out, natF(ns.frames[id]))
		}
	}
	return out
}
