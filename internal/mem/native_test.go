package mem

import (
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/mem/probebpf"
)

func labels(st []Frame) string {
	var b []string
	for _, f := range st {
		b = append(b, f.Function)
	}
	return strings.Join(b, " < ")
}

// The merge by counting: each eval-loop frame becomes the run of Python
// frames it executes; an incomplete unwind is marked where its callers
// are missing; a count that disagrees shows both stacks apart.
func TestNatMerge(t *testing.T) {
	n := newNatStacks(16384)
	ev := natFrame{label: "_PyEval_EvalFrameDefault", eval: true}
	leaf := []natFrame{{label: "_PyObject_Malloc"}, {label: "leak"}, ev, {label: "PyEval_EvalCode"}, {label: "main"}}
	n.add(1, natStack{frames: leaf, complete: true})
	n.add(2, natStack{frames: leaf[:3], stop: "stack_copy_end"})
	n.add(3, natStack{frames: append(append([]natFrame{}, leaf[:3]...), ev, natFrame{label: "main"}), complete: true})
	n.add(4, natStack{frames: leaf, complete: true}) // the same stack as 1
	if len(n.stacks) != 3 || n.lookup(4) != n.lookup(1) {
		t.Fatalf("dedup: %d stacks, ids 1 and 4: %d %d", len(n.stacks), n.lookup(1), n.lookup(4))
	}
	py := []Frame{{Function: "caller", Line: 8}, {Function: "<module>", Line: 20, Entry: true}}
	for _, c := range []struct {
		id   uint64
		want string
	}{
		{1, "_PyObject_Malloc < leak < caller < <module> < PyEval_EvalCode < main"},
		{2, "_PyObject_Malloc < leak < caller < <module> < [native stack incomplete: stack_copy_end]"},
		{3, "_PyObject_Malloc < leak < _PyEval_EvalFrameDefault < _PyEval_EvalFrameDefault < main < caller < <module> < [merge mismatch: native and Python stacks shown apart]"},
		{0, "caller < <module> < [no native stack copied]"},
		{99, "caller < <module> < [native stack not received]"},
	} {
		if got := labels(n.merge(py, n.lookup(c.id))); got != c.want {
			t.Errorf("copy %d:\n got %s\nwant %s", c.id, got, c.want)
		}
	}
	if got := labels(n.merge(nil, n.lookup(1))); !strings.HasSuffix(got, "main < [no Python stack]") || strings.Contains(got, "caller") {
		t.Errorf("without a Python stack: %s", got)
	}
	if n.stats.Merged != 2 || n.stats.Mismatch != 1 {
		t.Errorf("merged %d, mismatched %d", n.stats.Merged, n.stats.Mismatch)
	}
	// Grouped by both stacks; the site is the innermost Python frame.
	live := []probebpf.Live{{Size: 10, Est: 10, Stack: 5, Nat: 1}, {Size: 10, Est: 10, Stack: 5, Nat: 4}, {Size: 10, Est: 30, Stack: 5, Nat: 2}}
	all, total := liveSites(live, map[uint64][]Frame{5: py}, n)
	if total != 50 || len(all) != 2 || all[0].Bytes != 30 || all[1].Bytes != 20 || all[1].Function != "caller" || all[1].Line != 8 || all[1].Stack[1].Function != "leak" {
		t.Errorf("sites: %+v", all)
	}
}
