package record

import (
	"reflect"
	"testing"
)

func TestMergeStacks(t *testing.T) {
	const trunc = 99
	// Native root→leaf: main(1) eval(2) sort(3) eval(4) leaf(5).
	// Python innermost first: key(13) entered from C; caller(12), module(11) entered from C.
	nat := []natFrame{{1, false, true}, {2, true, true}, {3, false, true}, {4, true, true}, {5, false, true}}
	py := []pyFrame{{13, true, 0}, {12, false, 0}, {11, true, 0}}
	for _, c := range []struct {
		name     string
		nat      []natFrame
		py       []pyFrame
		complete bool
		want     []int
		ok       bool
	}{
		{"3.11+ runs", nat, py, true, []int{1, 11, 12, 3, 13, 5}, true},
		{"3.10 every frame entry", []natFrame{{1, false, true}, {2, true, true}, {2, true, true}, {5, false, true}}, []pyFrame{{12, true, 0}, {11, true, 0}}, true, []int{1, 11, 12, 5}, true},
		{"more evals than runs", nat, py[:1], true, nil, false},
		{"complete, fewer evals", nat[:3], py, true, nil, false},
		{"truncated: outer runs first", nat[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, true},
		{"no python, no evals", []natFrame{{1, false, true}, {5, false, true}}, nil, true, []int{1, 5}, true},
		{"outermost not marked entry", nat, []pyFrame{{13, true, 0}, {12, false, 0}, {11, false, 0}}, true, []int{1, 11, 12, 3, 13, 5}, true},
	} {
		got, ok := mergeStacks(nil, c.nat, c.py, c.complete, trunc)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestMergeLinked(t *testing.T) {
	const trunc, gone = 99, 98
	// Native root→leaf: main(1) eval(2) sort(3) eval(4) leaf(5), with stack
	// pointers falling towards the leaf; eval 2 spans [0x1800, 0x2000),
	// eval 4 [0x800, 0x1000).
	nat := []natFrame{{1, false, true}, {2, true, true}, {3, false, true}, {4, true, true}, {5, false, true}}
	lows := []uint64{0x2000, 0x1800, 0x1000, 0x800, 0x400}
	// Python innermost first: key(13) linked at 0x900; caller(12),
	// module(11) linked at 0x1900.
	py := []pyFrame{{13, true, 0x900}, {12, false, 0}, {11, true, 0x1900}}
	newer := append([]pyFrame{{14, true, 0x300}}, py...)
	for _, c := range []struct {
		name     string
		nat      []natFrame
		lows     []uint64
		py       []pyFrame
		complete bool
		want     []int
		gone     int
		ok       bool
	}{
		{"glued by address", nat, lows, py, true, []int{1, 11, 12, 3, 13, 5}, 0, true},
		{"run entered after the sample left out", nat, lows, newer, true, []int{1, 11, 12, 3, 13, 5}, 0, true},
		{"inner eval returned before the read", nat, lows, py[1:], true, []int{1, 11, 12, 3, gone, 5}, 1, true},
		{"outer eval without its run", nat, lows, py[:1], true, nil, 0, false},
		{"run inside a C frame: it returned", nat, lows, []pyFrame{{13, true, 0x1100}, {11, true, 0x1900}}, true, []int{1, 11, 3, gone, 5}, 1, true},
		{"run inside an unnamed frame", []natFrame{{1, false, true}, {2, true, true}, {3, false, false}, {4, true, true}, {5, false, true}}, lows, []pyFrame{{13, true, 0x1100}, {11, true, 0x1900}}, true, nil, 0, false},
		{"run inside the root frame", nat, lows, []pyFrame{{11, true, 0x2100}}, true, nil, 0, false},
		{"links out of order", nat, lows, []pyFrame{{13, true, 0x1900}, {11, true, 0x900}}, true, nil, 0, false},
		{"run above a whole stack", nat, lows, append(py[:3:3], pyFrame{10, true, 0x3000}), true, nil, 0, false},
		{"truncated: outer runs first", nat[2:], lows[2:], py, false, []int{11, 12, trunc, 3, 13, 5}, 0, true},
		{"truncated at an eval frame", nat[3:], lows[3:], []pyFrame{{13, true, 0x900}, {11, true, 0x5000}}, false, []int{11, trunc, 13, 5}, 0, true},
	} {
		got, g, ok := mergeLinked(nil, c.nat, c.lows, c.py, c.complete, trunc, gone)
		if ok != c.ok || g != c.gone || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v gone %d %v, want %v gone %d %v", c.name, got, g, ok, c.want, c.gone, c.ok)
		}
	}
	if !linkable(py) || linkable([]pyFrame{{13, true, 0}}) || linkable([]pyFrame{{13, false, 0x10}}) {
		t.Error("linkable")
	}
}
