package diagnose

import (
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/report"
)

func statOf(u, rqWait, rqShare float64, nrThrottled uint64, throttledS float64, verdicts ...string) *report.Stat {
	st := &report.Stat{WindowS: 1, Verdicts: verdicts}
	st.CPU.Utilization = u
	st.Sched.RunqueueWaitS, st.Sched.RunqueueShare, st.Sched.SchedstatAvail = rqWait, rqShare, true
	st.Cgroup = report.Cgroup{Version: 1, Path: "/x", NrPeriods: 10, NrThrottled: nrThrottled, ThrottledS: throttledS}
	return st
}

// stopped marks st stopped by someone else for share of its window.
func stopped(st *report.Stat, share float64) *report.Stat {
	st.Stopped = &report.Stopped{Threads: 1, Of: 1, Seconds: share * st.WindowS, Share: share, State: "T"}
	return st
}

// TestDecide: the decision's branches and what each rules out.
func TestDecide(t *testing.T) {
	blocker := report.Thread{Tid: 7, Name: "w", Utilization: 0.01, Voluntary: 100}
	cases := []struct {
		name     string
		st       *report.Stat
		threads  []report.Thread
		verdict  string
		cpu, off bool
		stop     bool
		ruled    []string
	}{
		{"throttled", statOf(0.2, 0.8, 0.8, 10, 0.8, "cpu-throttled", "runqueue-saturated"), nil, VerdictThrottled, false, false, true, nil},
		{"throttled a little", statOf(1, 0, 0, 1, 0.01), nil, VerdictOnCPU, true, false, false, []string{"cpu-throttling", "run-queue", "off-cpu waits"}},
		{"queued more than it ran", statOf(0.4, 0.6, 0.6, 0, 0, "runqueue-saturated"), nil, VerdictRunqueue, false, false, true, []string{"cpu-throttling"}},
		{"queued less than it ran", statOf(0.7, 0.3, 0.3, 0, 0, "runqueue-saturated"), nil, VerdictOnCPU, true, false, false, []string{"cpu-throttling", "off-cpu waits"}},
		{"off", statOf(0.1, 0, 0, 0, 0), nil, VerdictOffCPU, false, true, false, []string{"cpu-throttling", "run-queue", "on-cpu work"}},
		{"mixed", statOf(1, 0, 0, 0, 0), []report.Thread{blocker}, VerdictMixed, true, true, false, []string{"cpu-throttling", "run-queue"}},
		{"stopped", stopped(statOf(0, 0, 0, 0, 0, "stopped"), 1), nil, VerdictStopped, false, false, true, nil},
		{"stopped a little", stopped(statOf(0.1, 0, 0, 0, 0, "stopped", "off-cpu"), 0.2), nil, VerdictOffCPU, false, true, false, []string{"cpu-throttling", "run-queue", "on-cpu work"}},
	}
	for _, c := range cases {
		c.st.Threads = c.threads
		d := decide(c.st, 42)
		var ruled []string
		for _, r := range d.ruledOut {
			ruled = append(ruled, r.What)
		}
		if d.verdict != c.verdict || d.cpu != c.cpu || d.off != c.off || d.stop != c.stop || strings.Join(ruled, ",") != strings.Join(c.ruled, ",") {
			t.Errorf("%s: verdict %s cpu %v off %v stop %v ruled out %v; want %s %v %v %v %v", c.name, d.verdict, d.cpu, d.off, d.stop, ruled, c.verdict, c.cpu, c.off, c.stop, c.ruled)
		}
	}
}

// TestWaitsAndHottest: waits fold by class and innermost Python frame over
// threads with the heaviest waker; hottest by the innermost Python frame's
// function with its hottest line.
func TestWaitsAndHottest(t *testing.T) {
	py := func(f string, line int) flame.Frame {
		return flame.Frame{Kind: flame.Python, Function: f, File: "a.py", Line: line}
	}
	st := func(s string) flame.Frame { return flame.Frame{Kind: flame.State, Function: s} }
	th := func(s string) flame.Frame { return flame.Frame{Kind: flame.Thread, Function: s} }
	p := flame.New(flame.Meta{Unit: "microseconds"})
	p.Add([]flame.Frame{th("a"), py("main", 1), py("wait", 5), {Kind: flame.Kernel, Function: "futex_wait"}, st("[lock]"), st("[woken by] holder (3, this process)")}, 600000)
	p.Add([]flame.Frame{th("b"), py("main", 1), py("wait", 5), st("[lock]"), st("[woken by] other (4, this process)")}, 300000)
	p.Add([]flame.Frame{th("b"), py("main", 1), py("wait", 5), st("[lock]")}, 200000)
	p.Add([]flame.Frame{th("c"), py("nap", 9), st("[sleep]")}, 500000)
	p.Add([]flame.Frame{th("c"), st("[short waits: not read]"), st("[sleep]")}, 1000)
	p.Add([]flame.Frame{th("c"), py("nap", 9), st("[run-queue]")}, 900000)
	w := waits(p, 10)
	if len(w) != 3 || w[0] != (Wait{Class: "lock", Function: "wait", File: "a.py", Line: 5, Seconds: 1.1, Threads: 2, Waker: "holder (3, this process)"}) ||
		w[1].Class != "sleep" || w[1].Function != "nap" || w[2].Function != "[not read]" || w[2].File != "" {
		t.Errorf("waits %+v", w)
	}
	// Wake-ups in interrupt context are the interrupt's, whichever thread
	// it interrupted (or none): they add up under the interrupt's kind and
	// outweigh the thread that woke the sleeper for real less often.
	q := flame.New(flame.Meta{Unit: "microseconds"})
	q.Add([]flame.Frame{th("s"), py("nap", 9), st("[sleep]"), st("[woken by] [interrupt: timer] while burner (5, this process) ran")}, 400000)
	q.Add([]flame.Frame{th("s"), py("nap", 9), st("[sleep]"), st("[woken by] [interrupt: timer] on an idle CPU")}, 300000)
	q.Add([]flame.Frame{th("s"), py("nap", 9), st("[sleep]"), st("[woken by] burner (5, this process)")}, 500000)
	if w := waits(q, 10); len(w) != 1 || w[0].Waker != "[interrupt: timer]" {
		t.Errorf("interrupt wakers: %+v, want [interrupt: timer]", w)
	}
	c := flame.New(flame.Meta{Unit: "samples"})
	c.Add([]flame.Frame{py("main", 1), py("hot", 10)}, 60)
	c.Add([]flame.Frame{py("main", 1), py("hot", 11)}, 20)
	c.Add([]flame.Frame{py("main", 2), py("cold", 20), {Kind: flame.Native, Function: "memcpy"}}, 20)
	h := hottest(c, 10)
	if len(h) != 2 || h[0] != (Hot{Function: "hot", File: "a.py", Line: 10, Percent: 80, Samples: 80}) || h[1].Function != "cold" || h[1].Percent != 20 {
		t.Errorf("hottest %+v", h)
	}
}
