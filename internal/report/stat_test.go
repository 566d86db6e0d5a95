package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// throttledInput: a Python process with a busy worker in a 0.2-core v1
// cgroup, measured over 2 s, with multiplexed hardware counters.
func throttledInput() Input {
	a := &procfs.Sample{Time: t0, Pid: 4242, Comm: "python3.12", UTimeTicks: 1000, STimeTicks: 100, MinFlt: 10, MajFlt: 0,
		VmRSS: 10 << 20, HasIO: true, IO: procfs.IOCounters{RChar: 100, WChar: 100}, FDs: 5, FDSoft: 1024,
		Threads: []procfs.TaskSample{
			{Tid: 4242, Comm: "python3.12", State: "S", HasStatus: true, HasSched: true, VoluntaryCtxt: 10, RunNs: 1e9, WaitNs: 1e8, UTimeTicks: 100},
			{Tid: 4243, Comm: "python3.12", State: "R", HasStatus: true, HasSched: true, NonVolCtxt: 50, RunNs: 9e9, WaitNs: 2e9, UTimeTicks: 900, STimeTicks: 100},
		}}
	b := &procfs.Sample{Time: t0.Add(2 * time.Second), Pid: 4242, Comm: "python3.12", UTimeTicks: 1038, STimeTicks: 102, MinFlt: 30, MajFlt: 0,
		VmRSS: 12 << 20, VmHWM: 13 << 20, HasSmaps: true,
		Smaps: procfs.SmapsRollup{Pss: 8 << 20, PssAnon: 6 << 20, PssFile: 2 << 20, HasPssSplit: true},
		HasIO: true, IO: procfs.IOCounters{RChar: 4196, WChar: 100 + 1<<20, WriteBytes: 1 << 20, SyscR: 3, SyscW: 1}, FDs: 6, FDSoft: 1024,
		Threads: []procfs.TaskSample{
			{Tid: 4242, Comm: "python3.12", State: "S", Wchan: "do_select", Syscall: 7, HasStatus: true, HasSched: true, VoluntaryCtxt: 30, RunNs: 1.01e9, WaitNs: 1.001e8, UTimeTicks: 101},
			{Tid: 4243, Comm: "python3.12", State: "R", Syscall: -1, HasStatus: true, HasSched: true, NonVolCtxt: 90, VoluntaryCtxt: 2, RunNs: 9.39e9, WaitNs: 3.2e9, UTimeTicks: 937, STimeTicks: 102},
			{Tid: 4250, Comm: "python3.12", State: "S", Wchan: "futex_wait_queue", Syscall: 202, HasStatus: true, HasSched: true, VoluntaryCtxt: 1, RunNs: 1e6, WaitNs: 1e5},
		}}
	q := procfs.CgroupCPU{Version: 1, NrPeriods: 100, NrThrottled: 10, ThrottledNs: 5e8, HasThrottle: true, QuotaUS: 20000, PeriodUS: 100000}
	q2 := q
	q2.NrPeriods, q2.NrThrottled, q2.ThrottledNs = 120, 29, 5e8+1.6e9
	psA := procfs.Pressure{Source: "system", CPU: &procfs.PSI{Some: procfs.PSILine{TotalUS: 1000}},
		Memory: &procfs.PSI{Some: procfs.PSILine{TotalUS: 0}, HasFull: true}, IO: &procfs.PSI{Some: procfs.PSILine{TotalUS: 0}, HasFull: true}}
	psB := procfs.Pressure{Source: "system", CPU: &procfs.PSI{Some: procfs.PSILine{Avg10: 40, TotalUS: 1000 + 8e5}},
		Memory: &procfs.PSI{Some: procfs.PSILine{TotalUS: 0}, HasFull: true}, IO: &procfs.PSI{Some: procfs.PSILine{TotalUS: 2e4}, Full: procfs.PSILine{TotalUS: 1e4}, HasFull: true}}
	return Input{Pid: 4242, Mode: "window", A: a, B: b, Complete: true,
		Place: procfs.CgroupPlace{Version: 1, Path: "/pyobs-test"}, CgA: &q, CgB: &q2, PsA: psA, PsB: psB,
		Counters: []perfevent.Count{
			{Event: "task-clock", Group: 0, Supported: true, Raw: 4e8, Scaled: 4e8, Enabled: 4e8, Running: 4e8},
			{Event: "context-switches", Group: 0, Supported: true, Raw: 62, Scaled: 62, Enabled: 4e8, Running: 4e8},
			{Event: "cycles", Group: 1, Supported: true, Raw: 5e8, Scaled: 1e9, Enabled: 4e8, Running: 2e8, Estimate: true},
			{Event: "instructions", Group: 1, Supported: true, Raw: 6e8, Scaled: 1.2e9, Enabled: 4e8, Running: 2e8, Estimate: true},
			{Event: "branches", Group: 2, Reason: "not supported (ENOENT): no such event on this machine"},
		},
		Names:      map[int]string{4242: "MainThread", 4243: "worker"},
		Python:     true,
		States:     map[int]map[string]int{4242: {"S": 10}, 4243: {"R": 9, "S": 1}, 4250: {"S": 3}},
		Wchans:     map[int]map[string]int{4242: {"do_select": 10}, 4250: {"futex_wait_queue": 3}},
		OnlineCPUs: 2, DelayAcct: "off"}
}

// sleeperInput: a process that naps: off-cpu and blocking, and a thread in D.
func sleeperInput() Input {
	a := &procfs.Sample{Time: t0, Pid: 77, Comm: "sleeper", FDs: 900, FDSoft: 1024, HasIO: true, MajFlt: 5,
		Threads: []procfs.TaskSample{{Tid: 77, Comm: "sleeper", State: "S", HasStatus: true, VoluntaryCtxt: 1000}}}
	b := &procfs.Sample{Time: t0.Add(time.Second), Pid: 77, Comm: "sleeper", FDs: 950, FDSoft: 1024, HasIO: true, MajFlt: 55, UTimeTicks: 1,
		IO:      procfs.IOCounters{ReadBytes: 1 << 20},
		Threads: []procfs.TaskSample{{Tid: 77, Comm: "sleeper", State: "D", Wchan: "io_schedule", Syscall: 0, HasStatus: true, VoluntaryCtxt: 1180, NonVolCtxt: 2, UTimeTicks: 1}}}
	return Input{Pid: 77, Mode: "window", A: a, B: b, Complete: false, Notes: []string{"pid 77 exited during the window"},
		States: map[int]map[string]int{77: {"S": 4, "D": 1}}, Wchans: map[int]map[string]int{77: {"hrtimer_nanosleep": 4, "io_schedule": 1}},
		CgErr: "(no cgroup hierarchy with the cpu controller is mounted)", OnlineCPUs: 4, DelayAcct: "off",
		PerfNote: "perf counters unavailable: can't count perf events of pid 77: permission denied by kernel.perf_event_paranoid=3"}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got: %q\nwant: %q\n(go test -update rewrites it)", path, i+1, g, w)
			}
		}
	}
}

func TestReportStatTextGolden(t *testing.T) {
	for name, in := range map[string]Input{"stat_throttled.txt": throttledInput(), "stat_sleeper_incomplete.txt": sleeperInput()} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteStatText(&buf, Build(in)); err != nil {
				t.Fatal(err)
			}
			golden(t, name, buf.Bytes())
		})
	}
}

func TestReportStatJSONGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteStatJSON(&buf, Build(throttledInput()), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "stat_throttled.json", buf.Bytes())
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestReportVerdicts(t *testing.T) {
	st := Build(throttledInput())
	for _, v := range []string{"on-cpu", "cpu-throttled", "multiplexed"} {
		if !has(st.Verdicts, v) {
			t.Errorf("throttled: verdict %s missing from %v", v, st.Verdicts)
		}
	}
	// Its 1.2 s of run-queue wait is the cgroup's 1.6 s of throttling:
	// not a queue for a CPU, nor contention.
	if has(st.Verdicts, "runqueue-saturated") || has(st.Verdicts, "cpu-contention") {
		t.Errorf("throttled: %v, want neither runqueue-saturated nor cpu-contention: the wait is the throttling", st.Verdicts)
	}
	// A queue besides the throttling: 3.6 s of wait against 1.6 s throttled.
	in := throttledInput()
	in.B.Threads[1].WaitNs = 5.6e9
	if st := Build(in); !has(st.Verdicts, "runqueue-saturated") {
		t.Errorf("throttled and queued: verdicts %v, want runqueue-saturated", st.Verdicts)
	}
	if st.CPU.Utilization != 0.2 || st.Cgroup.NrThrottled != 19 || st.Cgroup.ThrottledS != 1.6 || *st.Cgroup.QuotaCores != 0.2 {
		t.Errorf("cpu %+v cgroup %+v", st.CPU, st.Cgroup)
	}
	if st.Ratios.IPC == nil || *st.Ratios.IPC != 1.2 {
		t.Errorf("ipc %v", st.Ratios.IPC)
	}
	if st.Sched.Voluntary != 23 || st.Sched.Nonvoluntary != 40 {
		t.Errorf("switches summed over threads: %+v", st.Sched)
	}
	for _, f := range st.Findings {
		if f.Threshold == "" || f.Next == "" || len(f.Evidence) == 0 || f.Sentence == "" {
			t.Errorf("finding without its numbers: %+v", f)
		}
	}
	st = Build(sleeperInput())
	for _, v := range []string{"off-cpu", "blocking", "blocking-io", "major-faults", "fd-pressure"} {
		if !has(st.Verdicts, v) {
			t.Errorf("sleeper: verdict %s missing from %v", v, st.Verdicts)
		}
	}
	if has(st.Verdicts, "on-cpu") || has(st.Verdicts, "multiplexed") || st.Complete {
		t.Errorf("sleeper: %v complete=%v", st.Verdicts, st.Complete)
	}
}

// TestReportStatJSONShape: the keys DESIGN.md promises.
func TestReportStatJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteStatJSON(&buf, Build(throttledInput()), false); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"":         {"schema", "pid", "window_s", "cpu", "sched", "memory", "cgroup", "counters", "threads", "verdicts"},
		"cpu":      {"utilization", "user_s", "system_s"},
		"sched":    {"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches", "runqueue_wait_s"},
		"cgroup":   {"version", "nr_periods", "nr_throttled", "throttled_s"},
		"counters": {"event", "value", "enabled_ns", "running_ns", "supported"},
	}
	for sec, keys := range want {
		obj := m
		if sec == "counters" {
			obj = m["counters"].([]any)[0].(map[string]any)
		} else if sec != "" {
			obj = m[sec].(map[string]any)
		}
		for _, k := range keys {
			if _, ok := obj[k]; !ok {
				t.Errorf("%s.%s missing", sec, k)
			}
		}
	}
	if m["schema"].(float64) != StatSchema {
		t.Errorf("schema %v", m["schema"])
	}
	for _, v := range m["verdicts"].([]any) {
		if _, ok := v.(string); !ok {
			t.Errorf("verdicts must be strings: %v", v)
		}
	}
	// An unsupported counter's value is null, never 0.
	for _, c := range m["counters"].([]any) {
		cm := c.(map[string]any)
		if cm["supported"] == false && cm["value"] != nil {
			t.Errorf("unsupported %v has value %v", cm["event"], cm["value"])
		}
	}
}

// TestReportContentionNeedsWait: involuntary switches are contention only
// when they cost a wait for the CPU, where schedstat can say: a burner
// preempted at each time slice but hardly queued is not (diagnose said
// "the scheduler keeps preempting it" beside a run queue it ruled out at
// 2 %).
func TestReportContentionNeedsWait(t *testing.T) {
	burner := func(waitNs uint64) Input {
		a := &procfs.Sample{Time: t0, Pid: 9, Comm: "burn", Threads: []procfs.TaskSample{
			{Tid: 9, Comm: "burn", State: "R", HasStatus: true, HasSched: true, RunNs: 1e9}}}
		b := &procfs.Sample{Time: t0.Add(time.Second), Pid: 9, Comm: "burn", UTimeTicks: 100, Threads: []procfs.TaskSample{
			{Tid: 9, Comm: "burn", State: "R", HasStatus: true, HasSched: true, NonVolCtxt: 250, RunNs: 2e9, WaitNs: waitNs, UTimeTicks: 100}}}
		return Input{Pid: 9, Mode: "window", A: a, B: b, Complete: true, OnlineCPUs: 2, DelayAcct: "off"}
	}
	if st := Build(burner(2e7)); has(st.Verdicts, "cpu-contention") {
		t.Errorf("250 preemptions/s, 2 %% run-queue wait: verdicts %v, want no cpu-contention", st.Verdicts)
	}
	st := Build(burner(3e8))
	if !has(st.Verdicts, "cpu-contention") {
		t.Errorf("250 preemptions/s, 23 %% run-queue wait: verdicts %v, want cpu-contention", st.Verdicts)
	}
}

// TestReportStopped: a target stopped by someone else for 3 s of a 4 s
// window, using one core the second it ran, is "stopped" (first, with the
// share) and on CPU over the time it ran — not off CPU over the window; a
// target stopped the whole window gets no on/off-CPU verdict; one of its
// threads stopped: the stop is said, the window judged whole.
func TestReportStopped(t *testing.T) {
	in := func(cpuTicks uint64, stops *procfs.Stops) Input {
		a := &procfs.Sample{Time: t0, Pid: 5, Comm: "py", Threads: []procfs.TaskSample{{Tid: 5, Comm: "py", State: "R", HasStatus: true}}}
		b := &procfs.Sample{Time: t0.Add(4 * time.Second), Pid: 5, Comm: "py", UTimeTicks: cpuTicks,
			Threads: []procfs.TaskSample{{Tid: 5, Comm: "py", State: "R", HasStatus: true, UTimeTicks: cpuTicks}}}
		return Input{Pid: 5, Mode: "window", A: a, B: b, Complete: true, Stopped: stops}
	}
	st := Build(in(100, &procfs.Stops{Threads: 1, Of: 1, Seconds: 3, State: "T", LookMS: 100}))
	if len(st.Verdicts) < 2 || st.Verdicts[0] != "stopped" || st.Verdicts[1] != "on-cpu" || has(st.Verdicts, "off-cpu") {
		t.Errorf("3 s of 4 stopped, 1 s of CPU: verdicts %v, want stopped then on-cpu", st.Verdicts)
	}
	if s := st.Stopped; s == nil || s.Share != 0.75 || !strings.Contains(st.Findings[0].Sentence, "for about 3.0 s of the 4.00 s window (75 %)") {
		t.Errorf("stopped %+v: %s", s, st.Findings[0].Sentence)
	}
	if f := st.Findings[1]; f.Evidence["utilization"] != 1 || !strings.Contains(f.Sentence, "over the 1.00 s it was not stopped") {
		t.Errorf("on-cpu over the time it ran: %+v", f)
	}
	st = Build(in(0, &procfs.Stops{Threads: 1, Of: 1, Seconds: 4, State: "T", LookMS: 100}))
	if len(st.Verdicts) != 1 || st.Verdicts[0] != "stopped" {
		t.Errorf("stopped the whole window: verdicts %v, want stopped alone", st.Verdicts)
	}
	st = Build(in(100, nil))
	if !has(st.Verdicts, "off-cpu") || st.Stopped != nil || has(st.Verdicts, "stopped") {
		t.Errorf("not stopped, 0.25 cores: verdicts %v", st.Verdicts)
	}
	st = Build(in(100, &procfs.Stops{Threads: 1, Of: 3, Seconds: 3, State: "t", LookMS: 100}))
	if st.Verdicts[0] != "stopped" || !has(st.Verdicts, "off-cpu") || !strings.Contains(st.Findings[0].Sentence, "1 of the target's 3 threads were stopped by a tracer") {
		t.Errorf("one thread stopped: verdicts %v, %s", st.Verdicts, st.Findings[0].Sentence)
	}
}
