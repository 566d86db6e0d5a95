package mixed

import (
	"reflect"
	"testing"
)

// nf builds a native frame: e eval (named interpreter), k known.
func nf(id int, e, k bool) Native { return Native{ID: id, Eval: e, Known: k} }

// un is an unnamed frame of the interpreter's binary, in the function at fn.
func un(id int, fn uint64) Native { return Native{ID: id, Func: fn, InInterp: true} }

// ext is an unnamed frame of another library (libc's msort, libffi).
func ext(id int, fn uint64) Native { return Native{ID: id, Func: fn} }

// The stacks of TestStacks and TestStacksGone. Native root→leaf: main(1)
// eval(2) sort(3) eval(4) leaf(5). Python innermost first: key(13)
// entered from C; caller(12), module(11) entered from C.
var (
	twoRunsNat = []Native{nf(1, false, true), nf(2, true, true), nf(3, false, true), nf(4, true, true), nf(5, false, true)}
	twoRunsPy  = []Python{{13, true, 0}, {12, false, 0}, {11, true, 0}}
)

func TestStacks(t *testing.T) {
	const trunc = 99
	nat, py := twoRunsNat, twoRunsPy
	for _, c := range []struct {
		name     string
		nat      []Native
		py       []Python
		complete bool
		want     []int
		ok       bool
	}{
		{"3.11+ runs", nat, py, true, []int{1, 11, 12, 3, 13, 5}, true},
		{"3.10 every frame entry", []Native{nf(1, false, true), nf(2, true, true), nf(2, true, true), nf(5, false, true)}, []Python{{12, true, 0}, {11, true, 0}}, true, []int{1, 11, 12, 5}, true},
		{"more evals than runs", nat, py[:1], true, nil, false},
		{"complete, fewer evals", nat[:3], py, true, nil, false},
		{"truncated: outer runs first", nat[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, true},
		{"no python, no evals", []Native{nf(1, false, true), nf(5, false, true)}, nil, true, []int{1, 5}, true},
		{"outermost not marked entry", nat, []Python{{13, true, 0}, {12, false, 0}, {11, false, 0}}, true, []int{1, 11, 12, 3, 13, 5}, true},
	} {
		got, ok := Stacks(nil, c.nat, c.py, c.complete, trunc)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// The innermost interpreter frames without a run become the gone marker;
// the outer runs keep their frames.
func TestStacksGone(t *testing.T) {
	nat, py := twoRunsNat, twoRunsPy
	for _, c := range []struct {
		name     string
		nat      []Native
		py       []Python
		complete bool
		want     []int
		n        int
		ok       bool
	}{
		{"all runs", nat, py, true, []int{1, 11, 12, 3, 13, 5}, 0, true},
		{"innermost run popped", nat, py[1:], true, []int{1, 11, 12, 3, gone, 5}, 1, true},
		{"no run at all", nat, nil, true, []int{1, gone, 3, gone, 5}, 2, true},
		{"complete, fewer evals", nat[:3], py, true, nil, 0, false},
		{"truncated: outer runs first", nat[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, 0, true},
	} {
		got, n, ok := StacksGone(nil, c.nat, c.py, c.complete, trunc, gone, 2)
		if ok != c.ok || n != c.n || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v gone %d %v, want %v gone %d %v", c.name, got, n, ok, c.want, c.n, c.ok)
		}
	}
	// At most maxGone: a thread stopped (dump) can be entering or leaving
	// one eval loop, its innermost, never two.
	if got, n, ok := StacksGone(nil, nat, py[1:], true, trunc, gone, 1); !ok || n != 1 || !reflect.DeepEqual(got, []int{1, 11, 12, 3, gone, 5}) {
		t.Errorf("one gone, maxGone 1: got %v gone %d %v", got, n, ok)
	}
	if _, _, ok := StacksGone(nil, nat, nil, true, trunc, gone, 1); ok {
		t.Error("two gone, maxGone 1: glued")
	}
	if _, _, ok := StacksGone(nil, nat, py[1:], true, trunc, gone, 0); ok {
		t.Error("one gone, maxGone 0: glued")
	}
}

type linkedCase struct {
	name     string
	nat      []Native
	lows     []uint64
	py       []Python
	complete bool
	want     []int
	gone     int
	ok       bool
}

const trunc, gone = 99, 98

func (c linkedCase) check(t *testing.T, l *Learner) {
	t.Helper()
	got, g, ok := l.Linked(nil, c.nat, c.lows, c.py, c.complete, trunc, gone)
	if ok != c.ok || g != c.gone || !reflect.DeepEqual(got, c.want) {
		t.Errorf("%s: got %v gone %d %v, want %v gone %d %v", c.name, got, g, ok, c.want, c.gone, c.ok)
	}
}

func TestLinked(t *testing.T) {
	// Native root→leaf: main(1) eval(2) sort(3) eval(4) leaf(5), with stack
	// pointers falling towards the leaf; eval 2 spans [0x1800, 0x2000),
	// eval 4 [0x800, 0x1000).
	nat := []Native{nf(1, false, true), nf(2, true, true), nf(3, false, true), nf(4, true, true), nf(5, false, true)}
	lows := []uint64{0x2000, 0x1800, 0x1000, 0x800, 0x400}
	// Python innermost first: key(13) linked at 0x900; caller(12),
	// module(11) linked at 0x1900.
	py := []Python{{13, true, 0x900}, {12, false, 0}, {11, true, 0x1900}}
	newer := append([]Python{{14, true, 0x300}}, py...)
	for _, c := range []linkedCase{
		{"glued by address", nat, lows, py, true, []int{1, 11, 12, 3, 13, 5}, 0, true},
		{"run entered after the sample left out", nat, lows, newer, true, []int{1, 11, 12, 3, 13, 5}, 0, true},
		{"inner eval returned before the read", nat, lows, py[1:], true, []int{1, 11, 12, 3, gone, 5}, 1, true},
		{"outer eval without its run", nat, lows, py[:1], true, nil, 0, false},
		{"run inside a C frame: it returned", nat, lows, []Python{{13, true, 0x1100}, {11, true, 0x1900}}, true, []int{1, 11, 3, gone, 5}, 1, true},
		{"run inside an unnamed frame: its interpreter frame", []Native{nf(1, false, true), nf(2, true, true), un(3, 0), nf(4, true, true), nf(5, false, true)}, lows, []Python{{13, true, 0x1100}, {11, true, 0x1900}}, true, []int{1, 11, 13, gone, 5}, 1, true},
		{"run inside the root frame", nat, lows, []Python{{11, true, 0x2100}}, true, nil, 0, false},
		{"links out of order", nat, lows, []Python{{13, true, 0x1900}, {11, true, 0x900}}, true, nil, 0, false},
		{"run above a whole stack", nat, lows, append(py[:3:3], Python{10, true, 0x3000}), true, nil, 0, false},
		{"truncated: outer runs first", nat[2:], lows[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, 0, true},
		{"truncated at an eval frame", nat[3:], lows[3:], []Python{{13, true, 0x900}, {11, true, 0x5000}}, false, []int{11, trunc, 13, 5}, 0, true},
	} {
		c.check(t, &Learner{})
	}
	if !Linkable(py) || Linkable([]Python{{13, true, 0}}) || Linkable([]Python{{13, false, 0x10}}) {
		t.Error("Linkable")
	}
}

// TestLinkedUnnamed: a static binary stripped to .dynsym (sid 3.14): the
// eval loop is an unnamed function (at 0xe000). The frame holding a link
// is the interpreter's; once a stack glues with it holding an outer run,
// its function is learned and a later frame of it without a link is marked
// as returned before the read.
func TestLinkedUnnamed(t *testing.T) {
	const evalFn, otherFn, libcFn = 0xe000, 0xf000, 0x7000
	// main(1) eval(2, unnamed) call(3, unnamed other) qsort(4) eval(5,
	// unnamed) leaf(6): eval 2 spans [0x1800, 0x2000), eval 5 [0x800, 0xc00).
	nat := []Native{nf(1, false, true), un(2, evalFn), un(3, otherFn), nf(4, false, true), un(5, evalFn), nf(6, false, true)}
	lows := []uint64{0x2000, 0x1800, 0x1000, 0xc00, 0x800, 0x400}
	py := []Python{{13, true, 0x900}, {12, false, 0}, {11, true, 0x1900}}
	compareGone := linkedCase{"learned: inner run returned before the read", nat, lows, py[1:], true, []int{1, 11, 12, 3, 4, gone, 6}, 1, true}

	l := &Learner{}
	// Before anything is learned, an unnamed frame without a link is just
	// an unnamed frame; a lone run (the innermost) teaches nothing.
	linkedCase{"not learned yet: plain frame", nat, lows, py[1:], true, []int{1, 11, 12, 3, 4, 5, 6}, 0, true}.check(t, l)
	if l.Learned() != 0 {
		t.Fatalf("the innermost run taught %d functions", l.Learned())
	}
	linkedCase{"unnamed frames holding links", nat, lows, py, true, []int{1, 11, 12, 3, 4, 13, 6}, 0, true}.check(t, l)
	if l.Learned() != 1 || !l.IsInterp(un(0, evalFn)) || l.IsInterp(un(0, otherFn)) {
		t.Fatalf("after an outer run glued: learned %d, eval %v, other %v", l.Learned(), l.IsInterp(un(0, evalFn)), l.IsInterp(un(0, otherFn)))
	}
	compareGone.check(t, l)
	linkedCase{"learned: both runs glued", nat, lows, py, true, []int{1, 11, 12, 3, 4, 13, 6}, 0, true}.check(t, l)
	// A learned frame outside of a glued one lost its run: mismatch.
	linkedCase{"learned: outer frame without its run", nat, lows, py[:1], true, nil, 0, false}.check(t, l)

	// A link inside an unnamed frame of the interpreter is no evidence that
	// it returned: the run stays glued there, not left out as entered after
	// the sample.
	l = &Learner{}
	linkedCase{"unnamed leaf holding a link", nat[:5], lows[:5], py, true, []int{1, 11, 12, 3, 4, 13}, 0, true}.check(t, l)

	// An unnamed frame of another library (libc's msort) cannot be the eval
	// loop: a link inside it means it returned and the run was entered
	// after the sample; it is left out, and nothing is learned.
	l = &Learner{}
	lib := []Native{nf(1, false, true), un(2, evalFn), ext(3, libcFn), ext(4, libcFn), un(5, evalFn), nf(6, false, true)}
	linkedCase{"link in another library's unnamed frame: it returned", lib, lows, []Python{{13, true, 0x1100}, {11, true, 0x1900}}, true, []int{1, 11, 3, 4, 5, 6}, 0, true}.check(t, l)
	if l.Learned() != 0 || l.IsInterp(ext(0, libcFn)) {
		t.Errorf("learned %d functions from a lone run and a returned frame", l.Learned())
	}

	// A failed merge learns nothing: the unnamed root of a whole stack
	// holding a link, or a run above a whole stack.
	l = &Learner{}
	linkedCase{"unnamed root holding a link", []Native{un(1, evalFn), nf(6, false, true)}, []uint64{0x2000, 0x400}, []Python{{11, true, 0x2100}}, true, nil, 0, false}.check(t, l)
	linkedCase{"run above a whole stack", nat, lows, append(py[:3:3], Python{10, true, 0x3000}), true, nil, 0, false}.check(t, l)
	if l.Learned() != 0 {
		t.Errorf("failed merges learned %d functions", l.Learned())
	}
	// An unnamed frame without a function identity (no CFI) glues but
	// teaches nothing.
	linkedCase{"unnamed frame without CFI", []Native{nf(1, false, true), un(2, 0), nf(3, false, true), un(5, 0), nf(6, false, true)}, []uint64{0x2000, 0x1800, 0xc00, 0x800, 0x400}, py, true, []int{1, 11, 12, 3, 13, 6}, 0, true}.check(t, l)
	if l.Learned() != 0 {
		t.Errorf("learned %d functions from a frame without CFI", l.Learned())
	}
}
