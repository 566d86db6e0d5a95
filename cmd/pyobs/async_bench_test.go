package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// BenchmarkTasksDump10k: `pyobs dump --tasks --format json` of a target
// with 10,006 pending tasks (asyncio_tree.py 10000), the whole command per
// op; on 3.14 the interpreter's own `python -m asyncio pstree` on the same
// target is timed once and reported as pstree-ms.
func BenchmarkTasksDump10k(b *testing.B) {
	testutil.RequireRoot(b)
	for _, label := range []string{"pyenv-3.13", "sid-3.14"} {
		b.Run(label, func(b *testing.B) {
			in := testutil.Find(b, label)
			tg := testutil.Start(b, in, "asyncio_tree.py", "10000")
			select {
			case <-tg.Lines:
			case <-time.After(20 * time.Second):
				b.Fatal("no truth line")
			}
			pid := fmt.Sprint(tg.Pid)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := testutil.Run(b, 60*time.Second, "dump", "--tasks", "--format", "json", "-p", pid)
				if r.Code != 0 {
					b.Fatalf("exit %d: %s", r.Code, r.Stderr)
				}
			}
			b.StopTimer()
			if label == "sid-3.14" {
				argv := append(append([]string{}, in.Argv...), "-m", "asyncio", "pstree", pid)
				start := time.Now()
				r := testutil.RunCmd(b, 120*time.Second, exec.Command(argv[0], argv[1:]...))
				if r.Code == 0 {
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "pstree-ms")
				}
			}
		})
	}
}

// BenchmarkRecordAsync: pyobs's CPU per sample recording asyncio_tree.py's
// CPU-bound task at 999 Hz for 2 s, without and with --async.
func BenchmarkRecordAsync(b *testing.B) {
	testutil.RequireRoot(b)
	in := testutil.Find(b, "sid-3.14")
	tg := testutil.Start(b, in, "asyncio_tree.py")
	pid := fmt.Sprint(tg.Pid)
	for _, async := range []bool{false, true} {
		name := "plain"
		if async {
			name = "async"
		}
		b.Run(name, func(b *testing.B) {
			var cpu, samples float64
			for i := 0; i < b.N; i++ {
				args := []string{"record", "-p", pid, "-d", "2s", "-F", "999", "--format", "json"}
				if async {
					args = append(args, "--async")
				}
				r := testutil.Run(b, 60*time.Second, args...)
				if r.Code != 0 {
					b.Fatalf("exit %d: %s", r.Code, r.Stderr)
				}
				var out struct {
					Meta struct {
						Samples      float64 `json:"samples"`
						ObserverCPUS float64 `json:"observer_cpu_s"`
					} `json:"meta"`
				}
				if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
					b.Fatal(err)
				}
				cpu += out.Meta.ObserverCPUS
				samples += out.Meta.Samples
			}
			b.ReportMetric(1e6*cpu/max(samples, 1), "µs-cpu/sample")
		})
	}
}
