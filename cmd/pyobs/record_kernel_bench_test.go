package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/testutil"
)

// schedNS is the on-CPU time of pid's live threads (schedstat, ns).
func schedNS(pid int) float64 {
	tids, err := procfs.Default().Tasks(pid)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, tid := range tids {
		if s, err := procfs.Default().TaskSchedstat(pid, tid); err == nil {
			sum += s.RunNs
		}
	}
	return float64(sum)
}

// window is pyobs's and the target's on-CPU time over a stretch of a
// recording.
type window struct{ obs, tgt float64 }

// recordWindows runs `record -F freq -d total` on the target and measures
// pyobs's and the target's CPU (schedstat) over [at[i], at[i+1]] after
// pyobs started. It returns the windows and the JSON meta.
func recordWindows(t *testing.T, pid, freq int, total time.Duration, engine string, at []time.Duration) ([]window, map[string]any) {
	t.Helper()
	out := t.TempDir() + "/p.json"
	ws, stderr := profWindows(t, pid, at, testutil.Binary(t), "record", "-p", fmt.Sprint(pid), "-F", fmt.Sprint(freq), "-d", total.String(),
		"--engine", engine, "--format", "json", "-o", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Meta map[string]any }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", strings.TrimSpace(stderr))
	return ws, doc.Meta
}

// profWindows runs a profiler (argv) on the target and measures its CPU
// and the target's (schedstat) over [at[i], at[i+1]] after it started; the
// profiler must end by itself. It returns the windows and its stderr.
func profWindows(t *testing.T, pid int, at []time.Duration, argv ...string) ([]window, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var marks []window
	for _, a := range at {
		time.Sleep(time.Until(start.Add(a)))
		marks = append(marks, window{schedNS(cmd.Process.Pid), schedNS(pid)})
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", argv[0], err, stderr.String())
	}
	var ws []window
	for i := 1; i < len(marks); i++ {
		ws = append(ws, window{marks[i].obs - marks[i-1].obs, marks[i].tgt - marks[i-1].tgt})
	}
	return ws, stderr.String()
}

// perSample is pyobs's CPU per sample over a window, the samples being
// the target's CPU × F (record's achieved rate is F within a few %).
func perSample(w window, freq int) float64 {
	if w.tgt <= 0 {
		return 0
	}
	return w.obs / (w.tgt / 1e9 * float64(freq)) / 1e3 // µs
}

// TestRecordKernelCost (PYOBS_BENCH=1; BENCHMARKS.md): observer CPU and BPF
// run time per sample of the bpf engine at 1 kHz and 20 kHz on
// kwalk_deep.py's 12-deep chain, and over a 60 s `record -F 999` on
// many_paths.py (300 functions, random 3–12-deep chains) in the first vs
// the last 10 s (PYOBS_BENCH_MINUTES=10: a 10-minute run, first vs last
// minute), for the bpf engine, (PYOBS_BENCH_PERF=1) the perf engine and
// (PYOBS_BENCH_PYSPY=PATH) py-spy --nonblocking.
func TestRecordKernelCost(t *testing.T) {
	if os.Getenv("PYOBS_BENCH") != "1" {
		t.Skip("a benchmark (~3 min), not a test: set PYOBS_BENCH=1 to measure")
	}
	requireKernelWalker(t)
	in := testutil.Find(t, "pyenv-3.12")
	if l := os.Getenv("PYOBS_BENCH_PYTHON"); l != "" {
		in = testutil.Find(t, l)
	}
	t.Run("deep12", func(t *testing.T) {
		tg := testutil.Start(t, in, "kwalk_deep.py")
		for _, freq := range []int{1000, 20000} {
			ws, m := recordWindows(t, tg.Pid, freq, 10*time.Second, "bpf", []time.Duration{2 * time.Second, 10 * time.Second})
			t.Logf("BENCH deep12 %s %d Hz: observer %.2f µs per sample over seconds 2-10 (whole run incl. load: %.2f µs); bpf run time %.2f µs per sample (%v); exact %v of %v",
				in.Label, freq, perSample(ws[0], freq), 1e6*m["observer_cpu_s"].(float64)/m["samples"].(float64),
				m["bpf_ns_per_sample"].(float64)/1e3, m["bpf_stats"], m["exact"], m["samples"])
		}
	})
	// The long run: PYOBS_BENCH_MINUTES (1), first vs last 10 s; from 2
	// minutes on, first vs last minute. py-spy (PYOBS_BENCH_PYSPY: its
	// path) runs the same length on its own target, --nonblocking.
	minutes := 1
	if m, err := strconv.Atoi(os.Getenv("PYOBS_BENCH_MINUTES")); err == nil && m > 0 {
		minutes = m
	}
	span := 10 * time.Second
	if minutes > 1 {
		span = time.Minute
	}
	total := time.Duration(minutes)*time.Minute + 2*time.Second
	at := []time.Duration{1500 * time.Millisecond, 1500*time.Millisecond + span, total - 500*time.Millisecond - span, total - 500*time.Millisecond}
	engines := []string{"bpf"}
	if os.Getenv("PYOBS_BENCH_PERF") == "1" {
		engines = append(engines, "perf")
	}
	for _, engine := range engines {
		t.Run("many_paths/"+engine, func(t *testing.T) {
			tg := testutil.Start(t, in, "many_paths.py")
			ws, m := recordWindows(t, tg.Pid, 999, total, engine, at)
			first, last := perSample(ws[0], 999), perSample(ws[2], 999)
			t.Logf("BENCH many_paths %s %s -F 999 %d min: observer %.2f µs per sample in the first %v, %.2f µs in the last %v (%+.0f %%); %.1f %% of a core then %.1f %%; samples %v, bpf %v ns per sample",
				in.Label, engine, minutes, first, span, last, span, 100*(last-first)/first, 100*ws[0].obs/float64(span), 100*ws[2].obs/float64(span), m["samples"], m["bpf_ns_per_sample"])
		})
	}
	if spy := os.Getenv("PYOBS_BENCH_PYSPY"); spy != "" {
		t.Run("many_paths/py-spy", func(t *testing.T) {
			tg := testutil.Start(t, in, "many_paths.py")
			ws, _ := profWindows(t, tg.Pid, at, spy, "record", "--pid", fmt.Sprint(tg.Pid), "--rate", "999", "--nonblocking",
				"--duration", fmt.Sprint(int(total/time.Second)), "--format", "raw", "-o", t.TempDir()+"/spy.txt")
			first, last := perSample(ws[0], 999), perSample(ws[2], 999)
			t.Logf("BENCH many_paths %s py-spy --nonblocking --rate 999 %d min: %.2f µs per sample (target CPU × 999) in the first %v, %.2f µs in the last %v (%+.0f %%); %.1f %% of a core then %.1f %%",
				in.Label, minutes, first, span, last, span, 100*(last-first)/first, 100*ws[0].obs/float64(span), 100*ws[2].obs/float64(span))
		})
	}
}
