package stat

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/report"
)

// TestAddSample: counters add for every member, gauges only for the
// living ones; threads are all kept.
func TestAddSample(t *testing.T) {
	sum := &procfs.Sample{}
	live := &procfs.Sample{UTimeTicks: 100, STimeTicks: 10, MajFlt: 2, VmRSS: 1 << 20, FDs: 5, NumThreads: 2,
		Threads: []procfs.TaskSample{{Tid: 1}, {Tid: 2}}, IO: procfs.IOCounters{RChar: 7}}
	gone := &procfs.Sample{UTimeTicks: 50, VmRSS: 1 << 30, FDs: 100, NumThreads: 1, Threads: []procfs.TaskSample{{Tid: 3}}, IO: procfs.IOCounters{RChar: 3}}
	addSample(sum, live, true)
	addSample(sum, gone, false)
	if sum.UTimeTicks != 150 || sum.STimeTicks != 10 || sum.MajFlt != 2 || sum.IO.RChar != 10 {
		t.Errorf("counters %+v", sum)
	}
	if sum.VmRSS != 1<<20 || sum.FDs != 5 || sum.NumThreads != 2 || len(sum.Threads) != 3 {
		t.Errorf("gauges: rss %d fds %d threads %d/%d", sum.VmRSS, sum.FDs, sum.NumThreads, len(sum.Threads))
	}
}

func TestWriteSetText(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := &procfs.Sample{Time: t0, Pid: 10, Comm: "python3"}
	b := &procfs.Sample{Time: t0.Add(2 * time.Second), Pid: 10, Comm: "python3", UTimeTicks: 150,
		Threads: []procfs.TaskSample{{Tid: 10, Comm: "python3", State: "R", UTimeTicks: 150}}}
	total := report.Build(report.Input{Pid: 10, Mode: "window", A: a, B: b, Complete: true})
	st := &SetStat{Kind: "process-set", Mode: "window", WindowS: 2, Total: total, Verdicts: total.Verdicts,
		Account: Account{Seen: 2, Late: 1, Exited: 1},
		Processes: []ProcStat{
			{Pid: 10, How: "seed", Argv: []string{"python3", "app.py"}, Utilization: 0.5, UserS: 1, Threads: 1, State: "running", RSSBytes: 2048},
			{Pid: 11, Parent: 10, How: "fork", Comm: "python3", Born: true, JoinedNs: 400e6, Exited: true, ExitedNs: 1500e6, Utilization: 0.25, UserS: 0.5, State: "exited"},
		}}
	var w bytes.Buffer
	if err := WriteSetText(&w, st); err != nil {
		t.Fatal(err)
	}
	out := w.String()
	for _, want := range []string{
		"pyobs stat: a set of 2 processes, window 2.00 s, 1 threads\n",
		"  processes: 2 seen, 1 joined during the window, 1 exited, 0 refused\n",
		"\nverdicts:\n  on-cpu",
		"born +0.40s, exited +1.50s",
		"[python3]",
		"python3 app.py",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pyobs stat: pid ") {
		t.Errorf("the one-process header is left:\n%s", out)
	}
	if p, th := strings.Index(out, "\nprocesses ("), strings.Index(out, "\nthreads:\n"); p < 0 || th < p {
		t.Errorf("processes table not before the threads:\n%s", out)
	}
}
