package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/testutil"
)

// startStoppable starts busy.py (a cruncher on CPU, a sleeper, the main
// thread in Event.wait) and makes sure it is continued at the end,
// whatever happens (before the target's own cleanup kills it).
func startStoppable(t *testing.T) *testutil.Target {
	t.Helper()
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "busy.py")
	t.Cleanup(func() { _ = syscall.Kill(tg.Pid, syscall.SIGCONT) })
	return tg
}

// stopAll sends SIGSTOP and returns once /proc shows every thread stopped
// (state T): the target's own account of when it stopped.
func stopAll(t *testing.T, pid int) (tids []int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	fs := procfs.Default()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		tids, _ = fs.Tasks(pid)
		n := 0
		for _, tid := range tids {
			if st, err := fs.TaskStat(pid, tid); err == nil && st.State == "T" {
				n++
			}
		}
		if n > 0 && n == len(tids) {
			return tids
		}
	}
	t.Fatalf("pid %d: not every thread stopped 5 s after SIGSTOP", pid)
	return nil
}

// TestOffcpuStopped: time a thread spends stopped by SIGSTOP is the class
// "stopped", on both engines — not lock, sleep or other after the call
// the thread was in. Whole window: the target stopped before the attach
// (read from procfs). Mid-window: stopped during the window (eBPF: the
// switch-out's prev_state; perf: procfs while it lasts), each thread's
// stopped time bounded by the target's truth: from every thread being T
// (lower) or the SIGSTOP (upper) to the SIGCONT. A CPU hog runs beside.
func TestOffcpuStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	for _, engine := range []string{offcpu.EngineBPF, offcpu.EnginePerf} {
		t.Run(engine, func(t *testing.T) {
			tg := startStoppable(t)
			run := func(d time.Duration) offcpuJSON {
				r := testutil.Run(t, time.Minute, "offcpu", "-p", fmt.Sprint(tg.Pid), "-d", d.String(), "--threads", "--format", "json", "--engine", engine)
				if r.Code != 0 {
					t.Fatalf("exit %d: %s", r.Code, r.Stderr)
				}
				var out offcpuJSON
				if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
					t.Fatalf("json: %v", err)
				}
				return out
			}
			waits := func(c map[string]float64) (stopped, other float64) {
				for k, v := range c {
					switch k {
					case offcpu.ClassStopped:
						stopped += v
					case offcpu.ClassRunQueue:
					default:
						other += v
					}
				}
				return
			}

			// Stopped for the whole window.
			tids := stopAll(t, tg.Pid)
			out := run(time.Second)
			if len(out.Result.Threads) != len(tids) {
				t.Errorf("%d threads in the account, the target has %d", len(out.Result.Threads), len(tids))
			}
			for _, th := range out.Result.Threads {
				stopped, other := waits(th.ClassS)
				t.Logf("whole window: %s (%d): window %.3fs, stopped %.3fs, other waits %.3fs %v", th.Name, th.Tid, th.WindowS, stopped, other, th.ClassS)
				if stopped < 0.95*th.WindowS || other > 0.01 {
					t.Errorf("%s stopped the whole %.3fs window: classes %v, want it all %q", th.Name, th.WindowS, th.ClassS, offcpu.ClassStopped)
				}
			}
			if err := syscall.Kill(tg.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}

			// Stopped for ~1 s in the middle of a 3 s window.
			time.Sleep(300 * time.Millisecond)
			done := make(chan offcpuJSON, 1)
			go func() { done <- run(3 * time.Second) }()
			time.Sleep(900 * time.Millisecond) // the engine attached (a load takes ~0.3 s)
			sent := time.Now()
			stopAll(t, tg.Pid)
			allT := time.Now()
			time.Sleep(time.Second)
			cont := time.Now()
			if err := syscall.Kill(tg.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			out = <-done
			lo, hi := cont.Sub(allT).Seconds(), cont.Sub(sent).Seconds()
			for _, th := range out.Result.Threads {
				stopped, _ := waits(th.ClassS)
				t.Logf("mid-window: %s: stopped %.3fs (truth %.3f-%.3fs) %v", th.Name, stopped, lo, hi, th.ClassS)
				// The stop ends at the SIGCONT's waking on the eBPF engine
				// (what follows, until the thread gets a CPU, is run-queue);
				// the perf engine has no waking and counts to the switch-in.
				slack := 0.01
				if engine == offcpu.EnginePerf {
					slack = 0.05
				}
				if stopped < lo-0.005 || stopped > hi+slack {
					t.Errorf("%s: %.3fs classed stopped, the target was stopped %.3f-%.3fs: %v", th.Name, stopped, lo, hi, th.ClassS)
				}
			}
		})
	}
}

// TestRecordStopped: record on a target stopped by SIGSTOP exits 0 as
// usual, and says so: the footer names the stop, the JSON's meta.stopped
// has every thread (counted from /proc) and about the whole window. On
// the same target running, neither says anything of a stop.
func TestRecordStopped(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startStoppable(t)
	rec := func() (flame.Meta, string) {
		out := t.TempDir() + "/p.json"
		r := testutil.Run(t, time.Minute, "record", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "-o", out)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Meta flame.Meta `json:"meta"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Meta, r.Stderr
	}
	tids := stopAll(t, tg.Pid)
	m, footer := rec()
	t.Logf("stopped: %+v; %s", m.Stopped, footer)
	if s := m.Stopped; s == nil || s.Threads != len(tids) || s.Of != len(tids) || s.State != "T" || s.Seconds < 0.8*m.DurationS {
		t.Errorf("meta.stopped %+v over %.2fs: want all %d threads, state T, about the whole window", s, m.DurationS, len(tids))
	}
	if !strings.Contains(footer, fmt.Sprintf("the target (its %d threads) was stopped by a signal", len(tids))) {
		t.Errorf("footer does not say the target was stopped: %s", footer)
	}
	if err := syscall.Kill(tg.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	m, footer = rec()
	if m.Stopped != nil || strings.Contains(footer, "stopped by") {
		t.Errorf("a running target reported stopped: %+v; %s", m.Stopped, footer)
	}
	if m.Samples == 0 {
		t.Errorf("no samples of the running target: %s", footer)
	}
}
