package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/report"
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
	return stopAllIn(t, pid, "T")
}

// stopAllIn is stopAll for a target whose stopped threads show as one of
// states (a ptrace tracee's group stop shows as t).
func stopAllIn(t *testing.T, pid int, states string) (tids []int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	fs := procfs.Default()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		tids, _ = fs.Tasks(pid)
		n := 0
		for _, tid := range tids {
			if st, err := fs.TaskStat(pid, tid); err == nil && st.State != "" && strings.Contains(states, st.State) {
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
		var doc struct {
			Meta flame.Meta `json:"meta"`
		}
		stderr := recordInto(t, &doc, "-p", fmt.Sprint(tg.Pid), "-d", "1s")
		return doc.Meta, stderr
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

// recordInto runs record with args, its JSON written to a file and read
// into doc; it returns record's stderr (the footer).
func recordInto(t *testing.T, doc any, args ...string) string {
	t.Helper()
	out := t.TempDir() + "/p.json"
	r := testutil.Run(t, time.Minute, append(append([]string{"record"}, args...), "-o", out)...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, doc); err != nil {
		t.Fatal(err)
	}
	return r.Stderr
}

// stopFor stops the target in the middle of a running command: after
// settle, SIGSTOP until every thread is T, then hold, then SIGCONT. It
// returns the bounds of the stop by the target's own account: from every
// thread seen T (lower) or the SIGSTOP (upper) to the SIGCONT.
func stopFor(t *testing.T, pid int, states string, settle, hold time.Duration) (lo, hi float64, tids []int) {
	t.Helper()
	time.Sleep(settle)
	sent := time.Now()
	tids = stopAllIn(t, pid, states)
	allT := time.Now()
	time.Sleep(hold)
	cont := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return cont.Sub(allT).Seconds(), cont.Sub(sent).Seconds(), tids
}

// lookSlack: the watch reads thread states every 100 ms, so a stop's
// measure is off by up to a look at each end, plus scheduling under the hog.
const lookSlack = 0.1 + 0.06

// TestStatStopped: stat over a window in which the target was SIGSTOPped
// (a CPU hog beside) says so — a "stopped" verdict and JSON stopped block
// with every thread, state T and the seconds within the test's own
// SIGSTOP/SIGCONT timing — and sends nobody to offcpu for it. Stopped the
// whole window: the stop is the only verdict (on/off CPU not judged). The
// same target running: no stop said.
func TestStatStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Binary(t) // built before the window whose middle is timed
	testutil.CPUHog(t, 1)
	tg := startStoppable(t)
	pid := fmt.Sprint(tg.Pid)
	parse := func(r testutil.Result) *report.Stat {
		var st report.Stat
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatalf("exit %d, not JSON: %v\n%s", r.Code, err, r.Stderr)
		}
		return &st
	}
	noOffcpu := func(st *report.Stat) {
		t.Helper()
		for _, f := range st.Findings {
			if f.Code == "off-cpu" || f.Code == "blocking" || strings.Contains(f.Next, "offcpu") {
				t.Errorf("a stopped target sent to offcpu: %s: %s (next: %s)", f.Code, f.Sentence, f.Next)
			}
		}
	}

	// Stopped ~2 s in the middle of a 4 s window.
	done := make(chan testutil.Result, 1)
	go func() { done <- testutil.Run(t, time.Minute, "stat", "--format", "json", "-p", pid, "-d", "4s") }()
	lo, hi, tids := stopFor(t, tg.Pid, "T", 800*time.Millisecond, 2*time.Second)
	st := parse(<-done)
	t.Logf("mid-window: verdicts %v, stopped %+v (truth %.3f-%.3fs)", st.Verdicts, st.Stopped, lo, hi)
	s := st.Stopped
	switch {
	case !hasVerdict(st, "stopped") || s == nil:
		t.Errorf("no stop said: verdicts %v, stopped %+v", st.Verdicts, s)
	case s.Seconds < lo-lookSlack || s.Seconds > hi+lookSlack:
		t.Errorf("stopped %.3fs, the target was stopped %.3f-%.3fs", s.Seconds, lo, hi)
	case s.Threads != len(tids) || s.Of != len(tids) || s.State != "T":
		t.Errorf("stopped %+v: want all %d threads, state T", s, len(tids))
	case math.Abs(s.Share-s.Seconds/st.WindowS) > 0.01:
		t.Errorf("share %.4f of a %.3fs window for %.3fs stopped", s.Share, st.WindowS, s.Seconds)
	case !strings.Contains(st.Findings[0].Sentence, "stopped by a signal"):
		t.Errorf("first finding: %+v", st.Findings[0])
	}
	noOffcpu(st)

	// Stopped the whole window.
	tids = stopAll(t, tg.Pid)
	st = parse(testutil.Run(t, time.Minute, "stat", "--format", "json", "-p", pid, "-d", "1s"))
	t.Logf("whole window: verdicts %v, stopped %+v", st.Verdicts, st.Stopped)
	if s := st.Stopped; s == nil || len(st.Verdicts) == 0 || st.Verdicts[0] != "stopped" || s.Seconds < 0.9*st.WindowS || s.Threads != len(tids) {
		t.Errorf("whole-window stop: verdicts %v, stopped %+v over %.3fs", st.Verdicts, s, st.WindowS)
	}
	if hasVerdict(st, "on-cpu") {
		t.Errorf("a target stopped the whole window judged on CPU: %v", st.Verdicts)
	}
	noOffcpu(st)
	if err := syscall.Kill(tg.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// Running: nothing said of a stop.
	st = parse(testutil.Run(t, time.Minute, "stat", "--format", "json", "-p", pid, "-d", "1s"))
	if st.Stopped != nil || hasVerdict(st, "stopped") {
		t.Errorf("a running target reported stopped: %v %+v", st.Verdicts, st.Stopped)
	}
}

// TestTraceStopped: trace on both engines over a window in which the
// target was SIGSTOPped (a CPU hog beside) says so — JSON "stopped" with
// the seconds within the test's own SIGSTOP/SIGCONT timing, a line under
// the table's header and a sentence in the footer — and tells it apart
// from pyobs's own stops (tracepoint: "pyobs stopped the target 0s").
func TestTraceStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Binary(t)
	testutil.CPUHog(t, 1)
	for _, engine := range []string{"tracepoint", "ptrace"} {
		t.Run(engine, func(t *testing.T) {
			tg := startStoppable(t)
			out := t.TempDir() + "/t.json"
			done := make(chan testutil.Result, 1)
			go func() {
				done <- testutil.Run(t, time.Minute, "trace", "--engine", engine, "-p", fmt.Sprint(tg.Pid), "-d", "4s", "--format", "json", "-o", out)
			}()
			// Under ptrace a group-stopped thread shows as t.
			lo, hi, tids := stopFor(t, tg.Pid, map[string]string{"tracepoint": "T", "ptrace": "Tt"}[engine], time.Second, 2*time.Second)
			r := <-done
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Stopped *procfs.Stops `json:"stopped"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			s := doc.Stopped
			t.Logf("stopped %+v (truth %.3f-%.3fs, %d threads); %s", s, lo, hi, len(tids), r.Stderr)
			slack := lookSlack
			if engine == "ptrace" {
				slack = 0.06 // the tracer's own group-stop account: no looks
			}
			switch {
			case s == nil:
				t.Fatalf("no stop said: %s", b)
			case s.Seconds < lo-slack || s.Seconds > hi+slack:
				t.Errorf("stopped %.3fs, the target was stopped %.3f-%.3fs", s.Seconds, lo, hi)
			case s.Threads != len(tids) || s.State != "T":
				t.Errorf("stopped %+v: want all %d threads, state T", s, len(tids))
			}
			if !strings.Contains(r.Stderr, "was stopped by a signal") {
				t.Errorf("footer does not say the stop: %s", r.Stderr)
			}
			if engine == "tracepoint" && !strings.Contains(r.Stderr, "pyobs stopped the target 0s") {
				t.Errorf("footer does not say pyobs's own stops apart: %s", r.Stderr)
			}
		})
	}
}

// TestTopStopped: top's JSON lines over a run in which the target was
// SIGSTOPped (a CPU hog beside) carry the stop: the intervals' stopped_s
// add up to the test's own SIGSTOP/SIGCONT timing, and stopped_all_s says
// the same.
func TestTopStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Binary(t)
	testutil.CPUHog(t, 1)
	tg := startStoppable(t)
	done := make(chan testutil.Result, 1)
	go func() {
		done <- testutil.Run(t, time.Minute, "top", "-p", fmt.Sprint(tg.Pid), "-d", "8s", "--format", "json")
	}()
	// Stopped well after the sampler's load (~1 s, more under the hog).
	lo, hi, _ := stopFor(t, tg.Pid, "T", 4*time.Second, 2*time.Second)
	r := <-done
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var sum, all float64
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var sn struct {
			ElapsedS   float64 `json:"elapsed_s"`
			StoppedS   float64 `json:"stopped_s"`
			StoppedAll float64 `json:"stopped_all_s"`
		}
		if err := json.Unmarshal([]byte(l), &sn); err != nil {
			t.Fatalf("not JSON: %v: %s", err, l)
		}
		sum += sn.StoppedS
		all = max(all, sn.StoppedAll)
		lines = append(lines, fmt.Sprintf("%.2fs: stopped %.3f (all %.3f)", sn.ElapsedS, sn.StoppedS, sn.StoppedAll))
	}
	t.Logf("truth %.3f-%.3fs; %s", lo, hi, strings.Join(lines, "; "))
	if sum < lo-lookSlack || sum > hi+lookSlack || math.Abs(all-sum) > 0.01 {
		t.Errorf("intervals' stopped_s sum %.3f, stopped_all_s %.3f; the target was stopped %.3f-%.3fs", sum, all, lo, hi)
	}
}

// TestMemStopped: mem's probes over a window in which the target was
// stopped by someone else say so, not that the build inlined its
// allocator (what a window without allocator calls suggests otherwise).
func TestMemStopped(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), "import time\nprint('READY', flush=True)\nwhile True:\n    x = [bytes(64) for _ in range(100)]\n    time.sleep(0.01)\n", nil)
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	r := testutil.Run(t, time.Minute, "mem", "--engine", "probe", "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	if r.Code != 0 || !strings.Contains(r.Stdout, "the target was stopped by someone else (state T)") || strings.Contains(r.Stdout, "inlined them") {
		t.Errorf("exit %d:\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
