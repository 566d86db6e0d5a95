package top

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
)

func py(name string, line int) flame.Frame {
	return flame.Frame{Kind: flame.Python, Function: name, File: "app.py", Line: line}
}

// TestDifferIntervals: each snapshot counts what its interval added; own is
// the innermost frame (not wall mode's trailing state), total counts a
// function once per sample under recursion, lines of one function add up.
func TestDifferIntervals(t *testing.T) {
	p := flame.New(flame.Meta{Mode: "wall", Unit: "samples"})
	th := flame.Frame{Kind: flame.Thread, Function: "MainThread (7)"}
	sleeping := flame.Frame{Kind: flame.State, Function: "[sleeping]"}
	p.Add([]flame.Frame{th, py("main", 1), py("fib", 3), py("fib", 4)}, 6)
	p.Add([]flame.Frame{th, py("main", 1), py("wait", 9), sleeping}, 2)
	p.Add([]flame.Frame{{Kind: flame.Thread, Function: "worker (8)"}, {Kind: flame.State, Function: "[late read]"}}, 2)
	d := newDiffer(0, Options{Freq: 10})
	sn := d.snapshot(p, record.Progress{Elapsed: time.Second, Samples: 10})
	get := func(sn *Snapshot, name string) Function {
		for _, f := range sn.Functions {
			if f.Function == name {
				return f
			}
		}
		t.Fatalf("no %s in %+v", name, sn.Functions)
		return Function{}
	}
	if sn.Samples != 10 || sn.SamplesPerS != 10 {
		t.Fatalf("samples %d, %.1f/s", sn.Samples, sn.SamplesPerS)
	}
	if f := get(sn, "fib"); f.Own != 6 || f.Total != 6 || f.OwnPct != 60 {
		t.Errorf("fib %+v: want own 6 total 6 (recursion counted once)", f)
	}
	if f := get(sn, "wait"); f.Own != 2 {
		t.Errorf("wait %+v: want own 2 (the thread state is not the function)", f)
	}
	if f := get(sn, "main"); f.Own != 0 || f.Total != 8 {
		t.Errorf("main %+v", f)
	}
	if f := get(sn, "[late read]"); f.Own != 2 {
		t.Errorf("marker %+v", f)
	}
	if sn.Functions[0].Function != "fib" || len(sn.Threads) != 2 || sn.Threads[0].Thread != "MainThread (7)" || sn.Threads[0].Pct != 80 {
		t.Errorf("order: %+v threads %+v", sn.Functions, sn.Threads)
	}
	// The next interval: only what was added.
	p.Add([]flame.Frame{th, py("main", 1), py("wait", 9), sleeping}, 5)
	sn = d.snapshot(p, record.Progress{Elapsed: 2 * time.Second, Samples: 15})
	if sn.Samples != 5 || len(sn.Functions) != 2 || sn.Functions[0].Function != "wait" {
		t.Fatalf("second interval: %d samples, %+v", sn.Samples, sn.Functions)
	}
	if f := get(sn, "wait"); f.Own != 5 || f.OwnAll != 7 || f.OwnPct != 100 {
		t.Errorf("wait %+v", f)
	}
}

// TestScreen: no line wider than the terminal, no control characters from
// a hostile name, the rows in the chosen order, the height respected.
func TestScreen(t *testing.T) {
	sn := &Snapshot{Pid: 42, Mode: "cpu", Engine: "bpf", Freq: 99, Samples: 10, SamplesPerS: 99,
		Threads: []Thread{{Thread: "MainThread (42)", Samples: 10, Pct: 100}},
		Functions: []Function{
			{Function: "b\x1b[2Jevil", File: "x.py", Own: 1, Total: 9, OwnPct: 10, TotalPct: 90},
			{Function: "a_hot", File: "x.py", Own: 9, Total: 9, OwnPct: 90, TotalPct: 90},
		}}
	for _, v := range []View{{Sort: ByOwn}, {Sort: ByName, Paused: true}} {
		lines := Screen(sn, v, 60, 24)
		last := lines[len(lines)-1]
		if !strings.Contains(last, "b?[2Jevil") {
			t.Errorf("hostile name not defused: %q", last)
		}
		if !strings.Contains(lines[len(lines)-2], "a_hot") {
			t.Errorf("%c: rows %q", v.Sort, lines)
		}
		for _, l := range lines {
			if utf8.RuneCountInString(l) > 60 || strings.ContainsRune(l, 0x1b) {
				t.Errorf("line %q", l)
			}
		}
		if v.Paused != strings.Contains(lines[0], "PAUSED") {
			t.Errorf("paused %v: %q", v.Paused, lines[0])
		}
	}
	sn.Functions[0].Function = "處理處理處理處理處理處理處理處理處理處理處理處理處理處理處理處理處理"
	for _, l := range Screen(sn, View{}, 60, 24) {
		cells := 0
		for _, r := range l {
			cells++
			if r >= 0x2e80 && r <= 0xffdc {
				cells++
			}
		}
		if cells > 60 {
			t.Errorf("%d cells: %q", cells, l)
		}
	}
	sn.Threads[0].Functions = []Function{{Function: "only_here", File: "y.py", Own: 3, Total: 3, OwnPct: 30, TotalPct: 30}}
	per := strings.Join(Screen(sn, View{Sort: ByOwn, PerThread: true}, 80, 24), "\n")
	if !strings.Contains(per, "── MainThread (42): 100.0% of the samples\n 30.0%") || strings.Contains(per, "a_hot") {
		t.Errorf("per thread:\n%s", per)
	}
	if n := len(Screen(sn, View{}, 80, 3)); n != 3 {
		t.Errorf("%d lines on a 3-line terminal", n)
	}
}

// TestScreenStopped: an interval in which the target was stopped says so
// on the screen; one without a stop has no such line.
func TestScreenStopped(t *testing.T) {
	sn := &Snapshot{Pid: 7, Mode: "cpu", Freq: 99, IntervalS: 1, ElapsedS: 3, StoppedS: 0.8, StoppedAll: 1.8}
	got := strings.Join(Screen(sn, View{}, 200, 40), "\n")
	if !strings.Contains(got, "STOPPED by a signal or a tracer for 0.8 s of this 1.0 s interval (1.8 s since the start)") {
		t.Errorf("no stop line:\n%s", got)
	}
	sn.StoppedS = 0
	if got := strings.Join(Screen(sn, View{}, 200, 40), "\n"); strings.Contains(got, "STOPPED") {
		t.Errorf("a stop line without a stop:\n%s", got)
	}
}
