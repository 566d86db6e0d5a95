package record

import (
	"reflect"
	"testing"
)

func TestMergeStacks(t *testing.T) {
	const trunc = 99
	// Native root→leaf: main(1) eval(2) sort(3) eval(4) leaf(5).
	// Python innermost first: key(13) entered from C; caller(12), module(11) entered from C.
	nat := []natFrame{{1, false}, {2, true}, {3, false}, {4, true}, {5, false}}
	py := []pyFrame{{13, true}, {12, false}, {11, true}}
	for _, c := range []struct {
		name     string
		nat      []natFrame
		py       []pyFrame
		complete bool
		want     []int
		ok       bool
	}{
		{"3.11+ runs", nat, py, true, []int{1, 11, 12, 3, 13, 5}, true},
		{"3.10 every frame entry", []natFrame{{1, false}, {2, true}, {2, true}, {5, false}}, []pyFrame{{12, true}, {11, true}}, true, []int{1, 11, 12, 5}, true},
		{"more evals than runs", nat, py[:1], true, nil, false},
		{"complete, fewer evals", nat[:3], py, true, nil, false},
		{"truncated: outer runs first", nat[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, true},
		{"no python, no evals", []natFrame{{1, false}, {5, false}}, nil, true, []int{1, 5}, true},
		{"outermost not marked entry", nat, []pyFrame{{13, true}, {12, false}, {11, false}}, true, []int{1, 11, 12, 3, 13, 5}, true},
	} {
		got, ok := mergeStacks(nil, c.nat, c.py, c.complete, trunc)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
