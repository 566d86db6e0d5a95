package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	cmd := exec.Command(testutil.Binary(t), "record", "-p", fmt.Sprint(pid), "-F", fmt.Sprint(freq), "-d", total.String(),
		"--engine", engine, "--format", "json", "-o", out)
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
		t.Fatalf("record: %v\n%s", err, stderr.String())
	}
	var ws []window
	for i := 1; i < len(marks); i++ {
		ws = append(ws, window{marks[i].obs - marks[i-1].obs, marks[i].tgt - marks[i-1].tgt})
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Meta map[string]any }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", strings.TrimSpace(stderr.String()))
	return ws, doc.Meta
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
// the last 10 s, for the bpf engine and (PYOBS_BENCH_PERF=1) the perf
// engine.
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
	engines := []string{"bpf"}
	if os.Getenv("PYOBS_BENCH_PERF") == "1" {
		engines = append(engines, "perf")
	}
	for _, engine := range engines {
		t.Run("many_paths/"+engine, func(t *testing.T) {
			tg := testutil.Start(t, in, "many_paths.py")
			ws, m := recordWindows(t, tg.Pid, 999, 62*time.Second, engine,
				[]time.Duration{1500 * time.Millisecond, 11500 * time.Millisecond, 51500 * time.Millisecond, 61500 * time.Millisecond})
			first, last := perSample(ws[0], 999), perSample(ws[2], 999)
			t.Logf("BENCH many_paths %s %s -F 999 60 s: observer %.2f µs per sample in the first 10 s, %.2f µs in the last 10 s (%+.0f %%); %.1f %% of a core then %.1f %%; samples %v, bpf %v ns per sample",
				in.Label, engine, first, last, 100*(last-first)/first, 100*ws[0].obs/10e9, 100*ws[2].obs/10e9, m["samples"], m["bpf_ns_per_sample"])
		})
	}
}
