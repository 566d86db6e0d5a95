package export

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The exposition of a known state, byte for byte (Debian's Prometheus
// scrapes the real thing in cmd/pyobs's agent tests).
func TestPromTextGolden(t *testing.T) {
	p := &Prom{cl: promLabels(&Resource{ServiceName: "svc \"a\"", Pid: 42, Labels: []Label{{Key: "team-x", Value: "core\\n"}}}),
		verdicts: map[string]bool{}, now: map[string]bool{}, cpuSec: map[string]float64{}, ctxsw: map[string]float64{},
		faults: map[string]float64{}, perf: map[string]float64{}, red: newRedCollector()}
	v := 1234.0
	t0 := time.Unix(1000, 0)
	for i, verdicts := range [][]string{{"cpu-bound", "runqueue"}, {"cpu-bound"}} {
		st := &report.Stat{}
		st.CPU.Utilization, st.CPU.UserS, st.CPU.SystemS = 0.5, 1.25, 0.25
		st.Sched.RunqueueShare, st.Sched.Voluntary, st.Sched.Nonvoluntary, st.Sched.RunqueueWaitS = 0.1, 10, 2, 0.5
		st.Memory.RSSBytes, st.Memory.MinorFaults = 1<<20, 7
		st.Counters = []report.Counter{{Event: "cycles", Supported: true, Value: &v}, {Event: "instructions"}}
		st.Verdicts = verdicts
		p.Observe(&Window{Start: t0.Add(time.Duration(i) * 15 * time.Second), End: t0.Add(time.Duration(i+1) * 15 * time.Second), Stat: st})
	}
	var h red.Hist
	for _, d := range []uint64{500_000, 3_000_000, 3_000_000, 2_000_000_000} {
		h.Add(d)
	}
	p.ObserveRED(&red.Result{Ports: []red.PortReport{{Port: 8080, Requests: 5, Errors: 1, Client4xx: 1,
		Routes: []red.RouteReport{{Route: "GET /a", Requests: 4, Errors: 1, Client4xx: 1, Duration: &red.Durations{Count: h.N, Hist: &h}}}}}})
	var b bytes.Buffer
	tx := newPromText(&b, p.cl)
	p.writeTarget(tx)
	p.red.write(tx)
	writeOwn(tx, Own{ObserverCPU: 1500 * time.Millisecond, Samples: 99, Windows: 2, Sinks: map[string]QueueStats{"otlp": {Sent: 2, Failed: 1, Queued: 1}}})
	if err := tx.flush(); err != nil {
		t.Fatal(err)
	}
	golden := "testdata/metrics.golden"
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("exposition differs from %s (go test -update to rewrite):\n%s", golden, b.String())
	}
	// Each family's HELP and TYPE come once, before its samples.
	seen := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name := strings.Fields(f)[0]
			if seen[name] {
				t.Errorf("family %s twice", name)
			}
			seen[name] = true
		}
	}
}

func TestWriteProcess(t *testing.T) {
	var b bytes.Buffer
	tx := newPromText(&b, nil)
	writeProcess(tx)
	_ = tx.flush()
	for _, name := range []string{"process_cpu_seconds_total ", "process_resident_memory_bytes ", "go_goroutines "} {
		if !strings.Contains(b.String(), "\n"+name) {
			t.Errorf("no %s in:\n%s", name, b.String())
		}
	}
}
