package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/red"
)

// Own is the agent's account of itself, read at every scrape.
type Own struct {
	ObserverCPU time.Duration // pyobs's CPU time since it started
	Samples     uint64        // CPU samples folded
	Lost        uint64        // samples the kernel dropped (ring full)
	Torn        uint64        // stacks read inconsistently (perf engine)
	Windows     uint64        // windows completed
	Sinks       map[string]QueueStats
}

// Prom serves /metrics on one address and nothing else.
type Prom struct {
	ln  net.Listener
	srv *http.Server
	cl  map[string]string // constant labels of every sample
	own func() Own

	mu       sync.Mutex
	verdicts map[string]bool // every verdict seen so far: 1 while present, 0 after
	now      map[string]bool // the last window's verdicts

	cpuUtil, rqShare, rss       float64
	cpuSec, ctxsw, faults, perf map[string]float64
	rqWait, throttled, wall     float64
	red                         *redCollector
}

// promLabels are the constant labels: Prometheus label names allow
// [a-zA-Z0-9_] only, so other characters of a --label key become '_'.
func promLabels(r *Resource) map[string]string {
	l := map[string]string{"service": r.ServiceName, "pid": strconv.Itoa(r.Pid)}
	for _, x := range r.Labels {
		k := []byte(x.Key)
		for i, c := range k {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
				k[i] = '_'
			}
		}
		if _, dup := l[string(k)]; !dup {
			l[string(k)] = x.Value
		}
	}
	return l
}

// NewProm listens on addr (host:port; examples use loopback) and serves
// GET /metrics there; own is called at each scrape.
func NewProm(addr string, r *Resource, own func() Own) (*Prom, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %q: can't listen: %w", addr, err)
	}
	p := &Prom{ln: ln, cl: promLabels(r), own: own, verdicts: map[string]bool{}, now: map[string]bool{},
		cpuSec: map[string]float64{}, ctxsw: map[string]float64{}, faults: map[string]float64{}, perf: map[string]float64{},
		red: newRedCollector()}
	mux := http.NewServeMux()
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if r.Method == http.MethodHead {
			return
		}
		_ = p.write(w)
	}))
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is where /metrics listens.
func (p *Prom) Addr() string { return p.ln.Addr().String() }

// Close stops serving.
func (p *Prom) Close(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ObserveRED folds one of red's interval reports into the metrics.
func (p *Prom) ObserveRED(r *red.Result) { p.red.observe(r) }

// Observe folds one window's stat into the metrics.
func (p *Prom) Observe(w *Window) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wall += max(0, w.End.Sub(w.Start).Seconds())
	st := w.Stat
	if st == nil {
		return
	}
	p.cpuUtil, p.rqShare, p.rss = st.CPU.Utilization, st.Sched.RunqueueShare, float64(st.Memory.RSSBytes)
	p.cpuSec["user"] += max(0, st.CPU.UserS)
	p.cpuSec["system"] += max(0, st.CPU.SystemS)
	p.ctxsw["voluntary"] += float64(st.Sched.Voluntary)
	p.ctxsw["nonvoluntary"] += float64(st.Sched.Nonvoluntary)
	p.faults["minor"] += float64(st.Memory.MinorFaults)
	p.faults["major"] += float64(st.Memory.MajorFaults)
	p.rqWait += max(0, st.Sched.RunqueueWaitS)
	p.throttled += max(0, st.Cgroup.ThrottledS)
	for _, c := range st.Counters {
		if c.Supported && c.Value != nil && *c.Value >= 0 {
			p.perf[c.Event] += *c.Value
		}
	}
	p.now = map[string]bool{}
	for _, v := range st.Verdicts {
		p.now[v] = true
		p.verdicts[v] = true
	}
}

// write renders every family, the target's and pyobs's own.
func (p *Prom) write(w io.Writer) error {
	t := newPromText(w, p.cl)
	p.writeTarget(t)
	p.red.write(t)
	writeOwn(t, p.own())
	writeProcess(t)
	return t.flush()
}

// writeTarget renders what the windows' stat said of the target.
func (p *Prom) writeTarget(t *promText) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gauge := func(name, help string, v float64) {
		t.family(name, help, "gauge")
		t.sample(name, v)
	}
	counter := func(name, help string, v float64) {
		t.family(name, help, "counter")
		t.sample(name, v)
	}
	byLabel := func(name, help, typ, label string, m map[string]float64) {
		if len(m) == 0 {
			return
		}
		t.family(name, help, typ)
		for _, k := range sortedKeys(m) {
			t.sample(name, m[k], promLabel{label, k})
		}
	}
	gauge("pyobs_target_cpu_utilization_cores", "stat: the target's CPU seconds per wall second over the last window (on-CPU share, in cores)", p.cpuUtil)
	gauge("pyobs_target_runqueue_wait_share", "stat: run-queue wait / (on-CPU + wait) of the target's threads over the last window", p.rqShare)
	gauge("pyobs_target_rss_bytes", "stat: the target's resident set at the end of the last window", p.rss)
	byLabel("pyobs_target_cpu_seconds_total", "stat: the target's CPU time over the agent's windows", "counter", "mode", p.cpuSec)
	byLabel("pyobs_target_context_switches_total", "stat: the target's context switches", "counter", "kind", p.ctxsw)
	byLabel("pyobs_target_page_faults_total", "stat: the target's page faults", "counter", "kind", p.faults)
	counter("pyobs_target_runqueue_wait_seconds_total", "stat: time the target's threads waited for a CPU (schedstat)", p.rqWait)
	counter("pyobs_target_cgroup_throttled_seconds_total", "stat: time the target's cgroup was throttled by its CPU quota", p.throttled)
	counter("pyobs_window_seconds_total", "wall time covered by the agent's windows", p.wall)
	byLabel("pyobs_target_perf_events_total", "stat: perf counters over the agent's windows (supported events only; scaled when multiplexed)", "counter", "event", p.perf)
	verdicts := map[string]float64{}
	for v := range p.verdicts {
		verdicts[v] = 0
		if p.now[v] {
			verdicts[v] = 1
		}
	}
	byLabel("pyobs_verdict", "stat's verdicts on the last window: 1 when given, 0 when given before but not now", "gauge", "verdict", verdicts)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ownHelp are pyobs's own counters.
var (
	ownHelp = []struct{ name, help string }{
		{"pyobs_observer_cpu_seconds_total", "pyobs's own CPU time (user + system, all its threads)"},
		{"pyobs_samples_total", "CPU samples folded into windows"},
		{"pyobs_samples_lost_total", "CPU samples the kernel dropped (ring full)"},
		{"pyobs_samples_torn_total", "stacks read inconsistently (perf engine; kept, marked)"},
		{"pyobs_windows_total", "windows completed"},
	}
	sinkHelp = []struct{ name, help, typ string }{
		{"pyobs_export_windows_total", "windows a sink accepted", "counter"},
		{"pyobs_export_failures_total", "failed export attempts (each retried with backoff)", "counter"},
		{"pyobs_export_dropped_windows_total", "windows never delivered: the queue was full or the window grew too old while the sink was down", "counter"},
		{"pyobs_export_queue_windows", "windows waiting for a sink", "gauge"},
	}
)

// writeOwn renders the agent's own account, read at scrape time.
func writeOwn(t *promText, s Own) {
	own := []float64{s.ObserverCPU.Seconds(), float64(s.Samples), float64(s.Lost), float64(s.Torn), float64(s.Windows)}
	for i, h := range ownHelp {
		t.family(h.name, h.help, "counter")
		t.sample(h.name, own[i])
	}
	if len(s.Sinks) == 0 {
		return
	}
	names := sortedKeys(s.Sinks)
	for i, h := range sinkHelp {
		t.family(h.name, h.help, h.typ)
		for _, n := range names {
			q := s.Sinks[n]
			v := [...]uint64{q.Sent, q.Failed, q.Dropped, uint64(q.Queued)}[i]
			t.sample(h.name, float64(v), promLabel{"sink", n})
		}
	}
}

// writeProcess renders pyobs's own process: CPU, memory, descriptors,
// goroutines, the Go heap (Prometheus's customary process_ and go_ names).
func writeProcess(t *promText) {
	if s, err := procfs.Default().Sample(os.Getpid(), procfs.SampleOptions{}); err == nil {
		t.family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter")
		t.sample("process_cpu_seconds_total", float64(s.UTimeTicks+s.STimeTicks)/procfs.UserHZ)
		if s.HasStatus {
			t.family("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge")
			t.sample("process_resident_memory_bytes", float64(s.VmRSS))
		}
		if s.HasFDs {
			t.family("process_open_fds", "Number of open file descriptors.", "gauge")
			t.sample("process_open_fds", float64(s.FDs))
			if s.FDSoft != math.MaxUint64 {
				t.family("process_max_fds", "Maximum number of open file descriptors.", "gauge")
				t.sample("process_max_fds", float64(s.FDSoft))
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.family("go_goroutines", "Number of goroutines that currently exist.", "gauge")
	t.sample("go_goroutines", float64(runtime.NumGoroutine()))
	t.family("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", "gauge")
	t.sample("go_memstats_heap_alloc_bytes", float64(ms.HeapAlloc))
	t.family("go_memstats_sys_bytes", "Number of bytes obtained from system.", "gauge")
	t.sample("go_memstats_sys_bytes", float64(ms.Sys))
}

// ReservedLabels are the label names the agent's own series and profiles
// carry (the target's service and pid, and each family's own label): a
// --label of one of these would give a series the same name twice (a
// scrape Prometheus rejects whole) or overwrite the agent's own.
var ReservedLabels = []string{"service", "pid", "mode", "kind", "event", "verdict", "sink", "port", "route", "le"}
