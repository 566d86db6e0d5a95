//go:build amd64

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/stat"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestSetStopped: record, stat and trace on a set of two processes, one
// of them SIGSTOPped for the whole run, say which one was stopped and
// count its threads among the set's: a stopped worker is not taken for
// an idle one, and the running one is never said stopped. Truth: the
// threads /proc lists for each process when every thread of the stopped
// one shows T.
func TestSetStopped(t *testing.T) {
	testutil.RequireRoot(t)
	run, stop := startStoppable(t), startStoppable(t)
	tids := stopAll(t, stop.Pid)
	others, err := procfs.Default().Tasks(run.Pid)
	if err != nil {
		t.Fatal(err)
	}
	of := len(tids) + len(others)
	for _, first := range []string{"stopped", "running"} {
		pids := []string{"-p", fmt.Sprint(stop.Pid), "-p", fmt.Sprint(run.Pid)}
		if first == "running" {
			pids = []string{"-p", fmt.Sprint(run.Pid), "-p", fmt.Sprint(stop.Pid)}
		}
		t.Run(first+" first", func(t *testing.T) { setStopped(t, pids, run, stop, tids, of) })
	}
}

// setStopped runs the three commands on pids (run's and stop's, in either
// order) and checks their accounts: stop's threads tids, of in all.
func setStopped(t *testing.T, pids []string, run, stop *testutil.Target, tids []int, of int) {
	// whole checks an account of the set: every thread of the stopped
	// process, among all of the set's, in 1 of its 2 processes, about the
	// whole window.
	whole := func(what string, s *procfs.Stops, window float64) {
		t.Helper()
		if s == nil || s.Threads != len(tids) || s.Of != of || s.Processes != 1 || s.Members != 2 || s.State != "T" || s.Seconds < 0.8*window {
			t.Errorf("%s: stopped %+v over %.2fs: want %d of %d threads, in 1 of 2 processes, state T, about the whole window", what, s, window, len(tids), of)
		}
	}
	mine := func(what string, pid int, s *procfs.Stops, window float64) {
		t.Helper()
		switch {
		case pid == run.Pid && s != nil:
			t.Errorf("%s: the running process %d said stopped: %+v", what, pid, s)
		case pid == stop.Pid && (s == nil || s.Threads != len(tids) || s.Of != len(tids) || s.Seconds < 0.8*window):
			t.Errorf("%s: the stopped process %d: %+v, want all its %d threads about the whole window", what, pid, s, len(tids))
		}
	}

	t.Run("record", func(t *testing.T) {
		var doc struct {
			Meta struct {
				DurationS float64       `json:"duration_s"`
				Stopped   *procfs.Stops `json:"stopped"`
			} `json:"meta"`
			record.SetAccount
		}
		stderr := recordInto(t, &doc, append(append([]string{}, pids...), "-d", "1s")...)
		whole("meta.stopped", doc.Meta.Stopped, doc.Meta.DurationS)
		if len(doc.Processes) != 2 {
			t.Fatalf("processes %+v, want the 2", doc.Processes)
		}
		for _, p := range doc.Processes {
			var s *procfs.Stops
			if p.Stopped != nil {
				s = &procfs.Stops{Threads: p.Stopped.Threads, Of: p.Stopped.Of, Seconds: p.Stopped.Seconds, State: p.Stopped.State}
			}
			mine("record", p.Pid, s, doc.Meta.DurationS)
		}
		if want := fmt.Sprintf("%d of the set's %d threads (in 1 of its 2 processes) were stopped by a signal", len(tids), of); !strings.Contains(stderr, want) {
			t.Errorf("footer does not say %q: %s", want, stderr)
		}
	})

	t.Run("stat", func(t *testing.T) {
		out := t.TempDir() + "/s.json"
		r := testutil.Run(t, time.Minute, append(append([]string{"stat"}, pids...), "-d", "1s", "--format", "json", "-o", out)...)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		st := readSetStat(t, out)
		s := st.Total.Stopped
		if s == nil {
			t.Fatalf("total.stopped absent (verdicts %v)", st.Verdicts)
		}
		whole("total.stopped", &procfs.Stops{Threads: s.Threads, Of: s.Of, Seconds: s.Seconds, State: s.State, Processes: s.Processes, Members: s.Members}, st.WindowS)
		if len(s.Pids) != 1 || s.Pids[0] != stop.Pid {
			t.Errorf("total.stopped.pids %v, want [%d]", s.Pids, stop.Pid)
		}
		if len(st.Verdicts) == 0 || st.Verdicts[0] != "stopped" {
			t.Errorf("verdicts %v: want stopped first", st.Verdicts)
		}
		for _, f := range st.Total.Findings {
			if f.Code == "stopped" && !strings.Contains(f.Next, fmt.Sprintf("kill -CONT %d ", stop.Pid)) {
				t.Errorf("the stop's next step names another process: %q", f.Next)
			}
		}
		for _, p := range st.Processes {
			var ps *procfs.Stops
			if p.Stopped != nil {
				ps = &procfs.Stops{Threads: p.Stopped.Threads, Of: p.Stopped.Of, Seconds: p.Stopped.Seconds, State: p.Stopped.State}
			}
			mine("stat", p.Pid, ps, st.WindowS)
		}
	})

	t.Run("stat -i", func(t *testing.T) {
		// Intervals: each one's watch starts where the last one's ended.
		r := testutil.Run(t, time.Minute, append(append([]string{"stat"}, pids...), "-i", "400ms", "-d", "1.2s", "--format", "json")...)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			var st stat.SetStat
			if err := json.Unmarshal([]byte(l), &st); err != nil {
				t.Fatalf("not a set document: %v: %s", err, l)
			}
			n++
			if st.WindowS < 0.2 {
				continue // a sliver at the end
			}
			s := st.Total.Stopped
			if s == nil {
				t.Errorf("interval %d (%.2fs): no stop said", n, st.WindowS)
				continue
			}
			whole(fmt.Sprintf("interval %d", n), &procfs.Stops{Threads: s.Threads, Of: s.Of, Seconds: s.Seconds, State: s.State, Processes: s.Processes, Members: s.Members}, st.WindowS)
		}
		if n < 2 {
			t.Errorf("%d intervals, want 3: %s", n, r.Stdout)
		}
	})

	t.Run("trace", func(t *testing.T) {
		r := testutil.Run(t, time.Minute, append(append([]string{"trace"}, pids...), "-d", "1s", "--format", "json")...)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var doc struct {
			DurationS float64       `json:"duration_s"`
			Stopped   *procfs.Stops `json:"stopped"`
			Processes []struct {
				Pid     int           `json:"pid"`
				Stopped *procfs.Stops `json:"stopped"`
			} `json:"processes"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
			t.Fatalf("%v: %s", err, r.Stdout)
		}
		whole("stopped", doc.Stopped, doc.DurationS)
		if len(doc.Processes) != 2 {
			t.Fatalf("processes %+v, want the 2", doc.Processes)
		}
		for _, p := range doc.Processes {
			mine("trace", p.Pid, p.Stopped, doc.DurationS)
		}
	})
}
