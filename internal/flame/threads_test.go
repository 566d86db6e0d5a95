package flame

import (
	"strings"
	"testing"
)

// TestThreadRoots: a thread's root keeps its frame when its name is
// learned after some of its samples (one root, relabelled in place), a
// TID reused by a new thread gets another frame, and a name change is
// seen by every stack that holds the root.
func TestThreadRoots(t *testing.T) {
	p := New(Meta{})
	tr := NewThreadRoots(p)
	leaf := p.Intern(Frame{Kind: Python, Function: "work", File: "a.py", Line: 3})
	a := tr.ID(ThreadKey{Tid: 7}, "")
	p.AddIDs([]int{a, leaf}, 2)
	tr.Relabel(ThreadKey{Tid: 7}, "req-7")
	if b := tr.ID(ThreadKey{Tid: 7}, "req-7"); b != a {
		t.Fatalf("a second root for thread 7: %d, %d", a, b)
	}
	p.AddIDs([]int{a, leaf}, 3)
	reused := tr.ID(ThreadKey{Tid: 7, Gen: 1}, "req-7")
	if reused == a {
		t.Fatal("a reused TID shares the first thread's root")
	}
	p.AddIDs([]int{reused, leaf}, 1)
	tr.Relabel(ThreadKey{Tid: 7, Gen: 1}, "other")
	tr.Relabel(ThreadKey{Tid: 9}, "never sampled") // no root: nothing
	var got []string
	for _, s := range p.Stacks() {
		got = append(got, p.FoldedKey(s)+" "+itoa(int(s.Weight)))
	}
	want := "other (7);work (a.py:3) 1|req-7 (7);work (a.py:3) 5"
	if strings.Join(got, "|") != want {
		t.Errorf("stacks %q, want %q", strings.Join(got, "|"), want)
	}
	if p.Intern(Frame{Kind: Thread, Function: "req-7 (7)"}) != a {
		t.Error("the relabelled root is not found by its new label")
	}
	if p.NumFrames() != 3 {
		t.Errorf("%d frames, want 3", p.NumFrames())
	}
}
