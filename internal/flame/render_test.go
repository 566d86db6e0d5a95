package flame

import (
	"bytes"
	"io"
	"testing"
)

// Every renderer's output depends on the stacks, not on the order they
// were folded in (nor on the frame table's order it implies).
func TestRenderersDeterministic(t *testing.T) {
	a := fixture("samples")
	b := New(a.Meta)
	st := a.Stacks()
	for i := len(st) - 1; i >= 0; i-- {
		frames := make([]Frame, len(st[i].Frames))
		for j := len(frames) - 1; j >= 0; j-- {
			frames[j] = a.Frame(st[i].Frames[j])
		}
		for k := int64(0); k < st[i].Count; k++ {
			b.Add(frames, st[i].Weight/st[i].Count)
		}
	}
	// Intern the frames in another order too.
	c := New(a.Meta)
	for i := a.NumFrames() - 1; i >= 0; i-- {
		c.Intern(a.Frame(i))
	}
	for _, s := range st {
		frames := make([]Frame, len(s.Frames))
		for j := range frames {
			frames[j] = a.Frame(s.Frames[j])
		}
		c.Add(frames, s.Weight)
	}
	for name, write := range map[string]func(io.Writer, *Profile) error{
		"folded": WriteFolded, "pprof": WritePprof, "speedscope": WriteSpeedscope, "gecko": WriteGecko,
		"svg": func(w io.Writer, p *Profile) error { return WriteSVG(w, p, SVGOptions{}) },
	} {
		var outs [3]bytes.Buffer
		for i, p := range []*Profile{a, b, c} {
			if err := write(&outs[i], p); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i < 3; i++ {
			if !bytes.Equal(outs[0].Bytes(), outs[i].Bytes()) {
				t.Errorf("%s: output %d differs:\n%s", name, i, lineDiff(outs[0].String(), outs[i].String()))
			}
		}
	}
}

func TestProfileRemove(t *testing.T) {
	p := New(Meta{})
	a := p.Intern(Frame{Kind: Python, Function: "a"})
	b := p.Intern(Frame{Kind: Python, Function: "b"})
	c := p.Intern(Frame{Kind: Python, Function: "c"})
	p.AddIDs([]int{a, b}, 5)
	p.AddIDs([]int{a, c}, 7)
	p.AddIDs([]int{a, b}, 1)
	w, n := p.Remove(func(s *Stack) bool { return s.Frames[len(s.Frames)-1] == b })
	if w != 6 || n != 1 || p.NumStacks() != 1 || p.Total() != 7 {
		t.Fatalf("removed %d in %d; left %d stacks, total %d", w, n, p.NumStacks(), p.Total())
	}
	p.AddIDs([]int{a, b}, 2) // a removed stack can come back
	if p.NumStacks() != 2 || p.Total() != 9 {
		t.Fatalf("after re-add: %d stacks, total %d", p.NumStacks(), p.Total())
	}
}

// TestProfileStacksStay: stacks live in chunks and their frame ids in
// shared arenas: a *Stack handed out stays the stack (callers key maps by
// it) while thousands more are added, appending to its Frames never
// touches the next stack's ids, and removing some keeps the rest findable.
func TestProfileStacksStay(t *testing.T) {
	p := New(Meta{})
	ids := func(i int) []int { return []int{i % 7, i, i + 1} }
	const n = 5000
	for i := range n {
		p.AddIDs(ids(i), int64(i))
	}
	held := map[int]*Stack{}
	p.EachStack(func(s *Stack) { held[s.Frames[1]] = s })
	for i := range n {
		p.AddIDs(ids(i), 1)          // again: the held stack gains
		p.AddIDs(ids(n+i), int64(i)) // new ones: more chunks, more arenas
	}
	for i, s := range held {
		if s.Weight != int64(i)+1 || s.Count != 2 {
			t.Fatalf("stack %v: weight %d count %d, want %d and 2", s.Frames, s.Weight, s.Count, i+1)
		}
	}
	_ = append(held[0].Frames, -1) // a caller's append must not reach stack 1's ids
	if f := held[1].Frames; f[0] != 1 || f[1] != 1 || f[2] != 2 {
		t.Fatalf("stack 1's ids became %v", f)
	}
	w, k := p.Remove(func(s *Stack) bool { return s.Frames[1]%2 == 0 })
	if k != n || p.NumStacks() != n {
		t.Fatalf("removed %d (weight %d), %d left; want %d and %d", k, w, p.NumStacks(), n, n)
	}
	for i := 1; i < 2*n; i += 2 {
		before := p.Total()
		p.AddIDs(ids(i), 1)
		if p.NumStacks() != n || p.Total() != before+1 {
			t.Fatalf("stack %d not found after the removal: %d stacks", i, p.NumStacks())
		}
	}
}
