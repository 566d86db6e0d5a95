package pyframes

import (
	"encoding/binary"
	"errors"
	"testing"
)

// chainWorld: a fake 3.12 process with one thread whose top frame is top
// (the caller wires the chain).
func chainWorld(t *testing.T, build func(w *world312, code func(string) uint64, shim uint64) uint64) (*world312, *Process, uint64) {
	t.Helper()
	w := newWorld312(t)
	simple := goldenCode(t, 12, "simple/simple")
	codes := map[string]uint64{}
	code := func(name string) uint64 {
		if c, ok := codes[name]; ok {
			return c
		}
		codes[name] = w.code(name, "chain.py", simple.FirstLineno, simple.table(t))
		return codes[name]
	}
	shim := w.frame(w.code("<interpreter trampoline>", "<shim>", 0, nil), 0, 0, 3)
	for _, n := range []string{"<module>", "Handle._run", "c1", "deep", "callee", "caller", "numbers", "leaf", "a", "b"} {
		code(n)
	}
	for (w.base+uint64(len(w.buf)))%4096 != 0 { // frames start a page: all in one window read
		w.alloc(16)
	}
	top := build(w, code, shim)
	interp := w.alloc(int(w.l.InterpModules) + 8)
	ts := w.tstate(interp, 0, top, 0x7f0000cccc00, 7)
	w.put64(w.base+w.l.RuntimeInterpretersHead, interp)
	w.put64(interp+w.l.InterpThreadsHead, ts)
	w.alloc(2 * 4096) // mapped to past the frames' page, as a data-stack chunk is
	p, err := New(w.snapshot(), 4242, w.info())
	if err != nil {
		t.Fatal(err)
	}
	return w, p, ts
}

func names(fr []Frame) []string {
	var out []string
	for _, f := range fr {
		out = append(out, f.Function)
	}
	return out
}

// TestHeapFramesHaveNoOrder: a running coroutine that awaits a chain of
// coroutines (deep recursing 4 deep under c1) — each frame in its own heap
// object (owner GENERATOR), the callee allocated below its caller, all
// inside the window read below the top frame. It is a whole, consistent
// stack, not "a caller above its callee".
func TestHeapFramesHaveNoOrder(t *testing.T) {
	_, p, ts := chainWorld(t, func(w *world312, code func(string) uint64, shim uint64) uint64 {
		// Allocated innermost first: each caller lies above its callee.
		var gens []uint64
		for i := 0; i < 6; i++ {
			gens = append(gens, w.frame(0, 0, 1, 1))
		}
		run := w.frame(code("Handle._run"), w.frame(code("<module>"), shim, 1, 0), 1, 0)
		entry := w.frame(w.code("<interpreter trampoline>", "<shim>", 0, nil), run, 0, 3) // the Task step's C call
		for i, g := range gens {
			name, prev := "deep", uint64(0)
			if i < 5 {
				prev = gens[i+1]
			}
			if i == 5 {
				name, prev = "c1", entry
			}
			w.put64(g+w.l.FrameCode, code(name))
			w.put64(g+w.l.FrameInstr, code(name)+w.l.CodeAdaptive+2)
			w.put64(g+w.l.FramePrevious, prev)
		}
		return gens[0]
	})
	fr, consistent, _, err := p.Stack(ts, Options{})
	want := []string{"deep", "deep", "deep", "deep", "deep", "c1", "Handle._run", "<module>"}
	if err != nil || !consistent || len(fr) != len(want) {
		t.Fatalf("stack %v consistent %v err %v, want %v", names(fr), consistent, err, want)
	}
	for i := range want {
		if fr[i].Function != want[i] {
			t.Fatalf("stack %v, want %v", names(fr), want)
		}
	}
}

// TestDataStackOrderStillChecked: two data-stack (THREAD) frames, the
// caller above its callee in one read of the stack: the chain was being
// rewritten. Torn, never a stack.
func TestDataStackOrderStillChecked(t *testing.T) {
	_, p, ts := chainWorld(t, func(w *world312, code func(string) uint64, shim uint64) uint64 {
		callee := w.frame(code("callee"), 0, 1, 0)
		caller := w.frame(code("caller"), shim, 1, 0)
		w.put64(callee+w.l.FramePrevious, caller)
		return callee
	})
	_, consistent, _, err := p.Stack(ts, Options{})
	if consistent || !errors.Is(err, ErrTorn) {
		t.Fatalf("consistent %v err %v, want a torn read", consistent, err)
	}
}

// TestGeneratorRootedChainIsIncomplete: a chain that ends (previous NULL)
// at a generator's frame — read right after it yielded, its callers gone —
// is not the thread's stack: it is reported incomplete (torn), not good.
func TestGeneratorRootedChainIsIncomplete(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		_, p, ts := chainWorld(t, func(w *world312, code func(string) uint64, shim uint64) uint64 {
			gen := w.frame(code("numbers"), 0, 1, 1)
			return w.frame(code("leaf"), gen, 1, 0)
		})
		fr, consistent, snap, err := p.Stack(ts, Options{Snapshot: snapshot})
		if consistent || snap || !errors.Is(err, ErrIncomplete) || !errors.Is(err, ErrTorn) {
			t.Errorf("snapshot option %v: stack %v consistent %v snapshot %v err %v, want incomplete", snapshot, names(fr), consistent, snap, err)
		}
	}
	m, ok := FrameModelFor(12)
	if !ok || m.Whole(LastFrame{Owner: m.OwnerGenerator}, 0) || !m.Whole(LastFrame{Owner: m.OwnerShim}, 0) {
		t.Errorf("3.12 model: %+v", m)
	}
}

// flipMem serves a Snapshot but answers every read of one 8-byte word (on
// its own) with the next of two values in turn: a thread whose top frame
// changes between any two reads of it.
type flipMem struct {
	s    *Snapshot
	addr uint64
	vals [2]uint64
	n    int
}

func (f *flipMem) Read(addr uint64, p []byte) error {
	if err := f.s.Read(addr, p); err != nil {
		return err
	}
	if f.addr == addr && len(p) == 8 {
		binary.LittleEndian.PutUint64(p, f.vals[f.n%2])
		f.n++
	}
	return nil
}

// TestStackChangingUnderRead: the thread's current frame changes between
// the walk and its re-check every time: retried, then reported torn with
// the last attempt's frames; with Options.Snapshot a stack read whole from
// one window read is accepted as a snapshot. Whole stacks only, either way.
func TestStackChangingUnderRead(t *testing.T) {
	var a, b uint64
	w, _, ts := chainWorld(t, func(w *world312, code func(string) uint64, shim uint64) uint64 {
		mod := w.frame(code("<module>"), shim, 1, 0)
		a = w.frame(code("a"), mod, 1, 0)
		b = w.frame(code("b"), mod, 1, 0)
		return a
	})
	cframe := binary.LittleEndian.Uint64(w.at(ts+w.l.TstateFrame, 8))
	for _, snapshot := range []bool{false, true} {
		m := &flipMem{s: w.snapshot(), addr: cframe + uint64(w.l.CFrameCurrentFrame), vals: [2]uint64{a, b}}
		p, err := New(m, 4242, w.info())
		if err != nil {
			t.Fatal(err)
		}
		fr, consistent, snap, err := p.Stack(ts, Options{Snapshot: snapshot})
		if consistent {
			t.Fatalf("snapshot option %v: a stack that changed under every read is consistent: %v", snapshot, names(fr))
		}
		if len(fr) != 2 || fr[1].Function != "<module>" {
			t.Errorf("snapshot option %v: frames %v, want one whole stack", snapshot, names(fr))
		}
		if snapshot != snap || (!snapshot && !errors.Is(err, ErrTorn)) {
			t.Errorf("snapshot option %v: snapshot %v err %v", snapshot, snap, err)
		}
		if !snapshot && p.Stats.TornRetries == 0 {
			t.Errorf("no retries: %+v", p.Stats)
		}
	}
}
