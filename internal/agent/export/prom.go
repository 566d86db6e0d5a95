package export

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
	reg *prometheus.Registry
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	verdicts map[string]bool // every verdict seen so far: 1 while present, 0 after

	cpuUtil, rqShare, rss   prometheus.Gauge
	verdict                 *prometheus.GaugeVec
	cpuSec, ctxsw, faults   *prometheus.CounterVec
	rqWait, throttled, wall prometheus.Counter
	perf                    *prometheus.CounterVec
	red                     *redCollector
}

// Ready-made const labels: Prometheus label names allow [a-zA-Z0-9_]
// only, so other characters of a --label key become '_'.
func promLabels(r *Resource) prometheus.Labels {
	l := prometheus.Labels{"service": r.ServiceName, "pid": strconv.Itoa(r.Pid)}
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
	p := &Prom{reg: prometheus.NewRegistry(), ln: ln, verdicts: map[string]bool{}}
	cl := promLabels(r)
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl})
		p.reg.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl})
		p.reg.MustRegister(x)
		return x
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		x := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
		p.reg.MustRegister(x)
		return x
	}
	p.cpuUtil = g("pyobs_target_cpu_utilization_cores", "stat: the target's CPU seconds per wall second over the last window (on-CPU share, in cores)")
	p.rqShare = g("pyobs_target_runqueue_wait_share", "stat: run-queue wait / (on-CPU + wait) of the target's threads over the last window")
	p.rss = g("pyobs_target_rss_bytes", "stat: the target's resident set at the end of the last window")
	p.cpuSec = cv("pyobs_target_cpu_seconds_total", "stat: the target's CPU time over the agent's windows", "mode")
	p.ctxsw = cv("pyobs_target_context_switches_total", "stat: the target's context switches", "kind")
	p.faults = cv("pyobs_target_page_faults_total", "stat: the target's page faults", "kind")
	p.rqWait = c("pyobs_target_runqueue_wait_seconds_total", "stat: time the target's threads waited for a CPU (schedstat)")
	p.throttled = c("pyobs_target_cgroup_throttled_seconds_total", "stat: time the target's cgroup was throttled by its CPU quota")
	p.wall = c("pyobs_window_seconds_total", "wall time covered by the agent's windows")
	p.perf = cv("pyobs_target_perf_events_total", "stat: perf counters over the agent's windows (supported events only; scaled when multiplexed)", "event")
	p.verdict = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pyobs_verdict", Help: "stat's verdicts on the last window: 1 when given, 0 when given before but not now", ConstLabels: cl}, []string{"verdict"})
	p.reg.MustRegister(p.verdict)
	p.red = newRedCollector(cl)
	p.reg.MustRegister(p.red)
	p.reg.MustRegister(&ownCollector{own: own, cl: cl})
	p.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.reg.MustRegister(collectors.NewGoCollector())
	mux := http.NewServeMux()
	h := promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
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
	p.wall.Add(max(0, w.End.Sub(w.Start).Seconds()))
	st := w.Stat
	if st == nil {
		return
	}
	p.cpuUtil.Set(st.CPU.Utilization)
	p.rqShare.Set(st.Sched.RunqueueShare)
	p.rss.Set(float64(st.Memory.RSSBytes))
	p.cpuSec.WithLabelValues("user").Add(max(0, st.CPU.UserS))
	p.cpuSec.WithLabelValues("system").Add(max(0, st.CPU.SystemS))
	p.ctxsw.WithLabelValues("voluntary").Add(float64(st.Sched.Voluntary))
	p.ctxsw.WithLabelValues("nonvoluntary").Add(float64(st.Sched.Nonvoluntary))
	p.faults.WithLabelValues("minor").Add(float64(st.Memory.MinorFaults))
	p.faults.WithLabelValues("major").Add(float64(st.Memory.MajorFaults))
	p.rqWait.Add(max(0, st.Sched.RunqueueWaitS))
	p.throttled.Add(max(0, st.Cgroup.ThrottledS))
	for _, c := range st.Counters {
		if c.Supported && c.Value != nil && *c.Value >= 0 {
			p.perf.WithLabelValues(c.Event).Add(*c.Value)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := map[string]bool{}
	for _, v := range st.Verdicts {
		now[v] = true
		p.verdicts[v] = true
	}
	for v := range p.verdicts {
		x := 0.0
		if now[v] {
			x = 1
		}
		p.verdict.WithLabelValues(v).Set(x)
	}
}

// ownCollector reads the agent's own account at scrape time.
type ownCollector struct {
	own func() Own
	cl  prometheus.Labels
}

var (
	ownDescs = map[string]string{
		"pyobs_observer_cpu_seconds_total": "pyobs's own CPU time (user + system, all its threads)",
		"pyobs_samples_total":              "CPU samples folded into windows",
		"pyobs_samples_lost_total":         "CPU samples the kernel dropped (ring full)",
		"pyobs_samples_torn_total":         "stacks read inconsistently (perf engine; kept, marked)",
		"pyobs_windows_total":              "windows completed",
	}
	sinkDescs = map[string]string{
		"pyobs_export_windows_total":         "windows a sink accepted",
		"pyobs_export_failures_total":        "failed export attempts (each retried with backoff)",
		"pyobs_export_dropped_windows_total": "windows never delivered: the queue was full or the window grew too old while the sink was down",
	}
)

func (o *ownCollector) desc(name string, sink bool) *prometheus.Desc {
	var labels []string
	help := ownDescs[name]
	if sink {
		labels = []string{"sink"}
		help = sinkDescs[name]
	}
	if name == "pyobs_export_queue_windows" {
		help = "windows waiting for a sink"
	}
	return prometheus.NewDesc(name, help, labels, o.cl)
}

func (o *ownCollector) Describe(ch chan<- *prometheus.Desc) {
	for n := range ownDescs {
		ch <- o.desc(n, false)
	}
	for n := range sinkDescs {
		ch <- o.desc(n, true)
	}
	ch <- o.desc("pyobs_export_queue_windows", true)
}

func (o *ownCollector) Collect(ch chan<- prometheus.Metric) {
	s := o.own()
	c := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(o.desc(name, len(labels) > 0), prometheus.CounterValue, v, labels...)
	}
	c("pyobs_observer_cpu_seconds_total", s.ObserverCPU.Seconds())
	c("pyobs_samples_total", float64(s.Samples))
	c("pyobs_samples_lost_total", float64(s.Lost))
	c("pyobs_samples_torn_total", float64(s.Torn))
	c("pyobs_windows_total", float64(s.Windows))
	for name, q := range s.Sinks {
		c("pyobs_export_windows_total", float64(q.Sent), name)
		c("pyobs_export_failures_total", float64(q.Failed), name)
		c("pyobs_export_dropped_windows_total", float64(q.Dropped), name)
		ch <- prometheus.MustNewConstMetric(o.desc("pyobs_export_queue_windows", true), prometheus.GaugeValue, float64(q.Queued), name)
	}
}
