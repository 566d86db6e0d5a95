package red

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procset"
)

// JSONVersion is the schema version of red's JSON (docs/json.md).
const JSONVersion = 1

// Price is what red costs the target, said in every report.
const Price = "eBPF tracepoints on syscalls, no stops"

// Result is one window (or interval) of RED per port: the report and its
// account (events, drops, stack reads, observer CPU, price, notes).
type Result struct {
	Version    int          `json:"version"`
	Pid        int          `json:"pid"`
	Mode       string       `json:"mode"` // window | interval
	WindowS    float64      `json:"window_s"`
	StartNs    int64        `json:"start_mono_ns"` // CLOCK_MONOTONIC
	EndNs      int64        `json:"end_mono_ns"`
	Ports      []PortReport `json:"ports"`
	Slowest    []SlowReport `json:"slowest"`
	Events     uint64       `json:"events"`
	Drops      Drops        `json:"drops"`
	StackReads uint64       `json:"stack_reads"`
	StackFail  uint64       `json:"stack_read_failures"`
	ObserverS  float64      `json:"observer_cpu_s"`
	Price      string       `json:"price"`
	QuantErr   float64      `json:"quantile_error_pct"`
	// Sampling is how --slowest and --profile got their stacks: the
	// kernel's samples (engine "bpf") or user-space reads only (engine
	// "user-read", fallback saying why).
	Sampling *SamplingReport `json:"sampling,omitempty"`
	Notes    []string        `json:"notes"`
	// Processes is the observed set's account (a set only: -p several,
	// --children, --cgroup, --all, or -- CMD): every process that was a
	// member, how it joined, whether it exited; ProcessCounts in numbers.
	Processes     []procset.Member `json:"processes,omitempty"`
	ProcessCounts *procset.Stats   `json:"process_counts,omitempty"`
	// Profile is --profile's flame graph (final report only): each
	// sample's Python stack under its request's route.
	Profile *flame.Profile `json:"-"`
}

// SamplingReport is the kernel sampler's account: on-CPU ticks of the
// target's threads taken; walks (ticks and switch-outs) whole, truncated,
// faulted, invalid, without a thread state or frame; records lost (ring or
// map full); waits of half a period or more; ticks and waits joined to a
// finished request, ticks outside any (idle work, or a request still in
// flight at the end).
type SamplingReport struct {
	Engine         string  `json:"engine"` // bpf | user-read
	Fallback       string  `json:"fallback,omitempty"`
	RequestedHz    int     `json:"requested_hz,omitempty"`
	CPUs           int     `json:"cpus,omitempty"`
	Samples        uint64  `json:"samples"`
	SwitchOuts     uint64  `json:"switch_outs"`
	Waits          uint64  `json:"waits"`
	Walked         uint64  `json:"walked"`
	Truncated      uint64  `json:"truncated"`
	Faulted        uint64  `json:"faulted"`
	Invalid        uint64  `json:"invalid"`
	NoPython       uint64  `json:"no_python"`
	NoFrame        uint64  `json:"no_frame"`
	Lost           uint64  `json:"lost"`
	Stacks         uint64  `json:"stacks"` // distinct stacks the kernel sent
	Joined         uint64  `json:"joined"`
	JoinedWaits    uint64  `json:"joined_waits"`
	Outside        uint64  `json:"outside_requests"`
	Unnamed        uint64  `json:"unnamed"` // joined samples whose stack never arrived
	SymbolErrors   uint64  `json:"symbol_errors"`
	BPFNSPerSample float64 `json:"bpf_ns_per_sample,omitempty"`
	BPFNSPerSwitch float64 `json:"bpf_ns_per_switch,omitempty"`
	BPFStats       string  `json:"bpf_stats,omitempty"` // whether the kernel's bpf run-time accounting was on, or why not
	Error          string  `json:"error,omitempty"`
}

// Drops are events the observer did not get.
type Drops struct {
	RingFull   uint64 `json:"ring_full"`
	EnterFull  uint64 `json:"enter_map_full"`
	NoEnter    uint64 `json:"entry_not_seen"`
	CopyFailed uint64 `json:"copy_failed"`
	Decode     uint64 `json:"decode_errors"`
}

// Durations summarises a histogram in milliseconds.
type Durations struct {
	Count  uint64  `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// Hist is the histogram behind the numbers (the agent's Prometheus
	// buckets); it belongs to the report.
	Hist *Hist `json:"-"`
}

func summarise(h *Hist) *Durations {
	if h.N == 0 {
		return nil
	}
	ms := func(v uint64) float64 { return float64(v) / 1e6 }
	hc := *h
	return &Durations{Count: h.N, MeanMs: float64(h.Sum) / float64(h.N) / 1e6,
		P50Ms: ms(h.Quantile(0.50)), P90Ms: ms(h.Quantile(0.90)), P99Ms: ms(h.Quantile(0.99)), MaxMs: ms(h.Max), Hist: &hc}
}

// PortReport is one listening port.
type PortReport struct {
	Port        int               `json:"port"`
	Proto       string            `json:"proto"` // http | other | mixed | none
	Requests    uint64            `json:"requests"`
	RatePerS    float64           `json:"rate_per_s"`
	Errors      uint64            `json:"errors"`
	ErrorPct    float64           `json:"error_pct"`
	Client4xx   uint64            `json:"client_errors_4xx"`
	Client4xxPc float64           `json:"client_error_4xx_pct"`
	Aborted     map[string]uint64 `json:"aborted"`
	Status      map[string]uint64 `json:"status"`
	Duration    *Durations        `json:"duration"`
	Queue       *Durations        `json:"queue"`
	InFlight    int               `json:"in_flight"`
	Unnamed     uint64            `json:"unnamed_requests"`
	Routes      []RouteReport     `json:"routes"`
	// Workers: per process of a set, the requests of the connections it
	// accepted (a prefork server's workers share the listening socket).
	Workers   []WorkerReport `json:"workers,omitempty"`
	Conns     ConnReport     `json:"connections"`
	NotParsed []NotParsed    `json:"not_parsed"`
}

// WorkerReport is one process's share of a port.
type WorkerReport struct {
	Pid       int        `json:"pid"`
	Requests  uint64     `json:"requests"`
	Errors    uint64     `json:"errors"`
	ErrorPct  float64    `json:"error_pct"`
	Client4xx uint64     `json:"client_errors_4xx"`
	Duration  *Durations `json:"duration"`
}

// RouteReport is one method + path.
type RouteReport struct {
	Route     string     `json:"route"`
	Requests  uint64     `json:"requests"`
	Errors    uint64     `json:"errors"`
	Client4xx uint64     `json:"client_errors_4xx"`
	Duration  *Durations `json:"duration"`
}

// ConnReport is connection-level RED (every protocol).
type ConnReport struct {
	Opened   uint64     `json:"opened"`
	Closed   uint64     `json:"closed"`
	Open     int        `json:"open"`
	RatePerS float64    `json:"rate_per_s"`
	Resets   uint64     `json:"resets"`
	BytesIn  uint64     `json:"bytes_in"`
	BytesOut uint64     `json:"bytes_out"`
	Duration *Durations `json:"duration"`
}

// NotParsed says why some connections got only connection-level numbers.
type NotParsed struct {
	Why         string `json:"why"`
	Connections uint64 `json:"connections"`
}

// SlowReport is one of the slowest requests.
type SlowReport struct {
	Port       int          `json:"port"`
	Pid        int          `json:"pid,omitempty"` // a set only: the process that served it
	Method     string       `json:"method"`
	Path       string       `json:"path"`
	Route      string       `json:"route"`
	Status     int          `json:"status"`
	DurationMs float64      `json:"duration_ms"`
	StartS     float64      `json:"start_s"` // since the measurement began
	Error      string       `json:"error,omitempty"`
	Tid        uint32       `json:"tid"`
	Stack      []StackFrame `json:"stack"`       // innermost first; the one most often seen in flight
	StackSeen  int          `json:"stack_seen"`  // stack reads and kernel samples that saw it
	StackReads int          `json:"stack_reads"` // user-space reads of its thread while in flight
	// StackSamples: kernel samples of its thread while it was served;
	// StackSource: kernel when kernel samples saw Stack, user-read when
	// only user-space reads did.
	StackSamples int    `json:"stack_samples"`
	StackSource  string `json:"stack_source,omitempty"`
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func (e *engine) report(start, end int64, final bool) *Result {
	ports, inflight, open := e.tr.TakeWindow()
	win := float64(end-start) / 1e9
	r := &Result{Version: JSONVersion, Pid: e.s.Pid, Mode: "interval", WindowS: win, StartNs: start, EndNs: end,
		Events: e.tr.Events, StackReads: e.reads, StackFail: e.failed, Price: Price,
		QuantErr: 100 * QuantileError, ObserverS: (clock.ObserverCPU() - e.cpu0).Seconds(),
		Ports: []PortReport{}, Slowest: []SlowReport{}, Notes: append([]string{}, e.notes...)}
	if final {
		r.Mode = "window"
	}
	if c, err := e.probe.counters(); err == nil {
		r.Drops = Drops{RingFull: c.RingFull, EnterFull: c.EnterFull, NoEnter: c.NoEnter, CopyFailed: c.CopyFailed}
	}
	r.Drops.Decode = e.decode
	for _, ps := range ports {
		pr := buildPort(ps, win, inflight[ps.Port], open[ps.Port])
		if e.many {
			pr.Workers = buildWorkers(ps)
		}
		r.Ports = append(r.Ports, pr)
	}
	if set := e.probe.set; set != nil {
		r.Processes = set.Members()
		st := set.Stats()
		r.ProcessCounts = &st
		if r.Processes == nil {
			r.Processes = []procset.Member{}
		}
	}
	for _, f := range e.tr.Slowest() {
		s := SlowReport{Port: f.Port, Method: f.Head.Method, Path: f.Head.Target, Status: f.Status,
			DurationMs: float64(f.Dur) / 1e6, StartS: float64(int64(f.Start)-e.started) / 1e9,
			Error: f.Aborted, Tid: f.Tid, Stack: f.Stack, StackSeen: f.StackN, StackReads: f.Reads, StackSamples: f.Samples}
		switch {
		case f.StackK > 0:
			s.StackSource = "kernel"
		case f.StackN > 0:
			s.StackSource = "user-read"
		}
		if e.many {
			s.Pid = f.Pid
		}
		if f.Named {
			s.Route = Route(f.Head)
		} else {
			s.Route = "[unnamed]"
		}
		if s.Stack == nil {
			s.Stack = []StackFrame{}
		}
		r.Slowest = append(r.Slowest, s)
	}
	switch {
	case e.ks != nil:
		r.Sampling = e.ks.report(final, win)
		if final {
			r.Profile = e.ks.prof
		}
	case e.opt.Slowest > 0 || e.opt.Profile:
		r.Sampling = &SamplingReport{Engine: "user-read", Fallback: e.ksWhy}
	}
	if e.exited != "" {
		r.Notes = append(r.Notes, e.exited)
	}
	if e.tids == nil {
		r.Notes = append(r.Notes, "no Python frame walker for this target: --slowest has no stacks")
	}
	if r.Drops.RingFull > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d events were lost (ring buffer full): counts are low", r.Drops.RingFull))
	}
	return r
}

func buildPort(ps *PortStats, win float64, inflight, open int) PortReport {
	pr := PortReport{Port: ps.Port, Requests: ps.Requests, Errors: ps.Errors, Client4xx: ps.Client4xx,
		ErrorPct: pct(ps.Errors, ps.Requests), Client4xxPc: pct(ps.Client4xx, ps.Requests),
		Aborted: ps.Aborted, Status: map[string]uint64{}, Duration: summarise(&ps.Dur), Queue: summarise(&ps.Queue),
		InFlight: inflight, Unnamed: ps.Unnamed, Routes: []RouteReport{}, NotParsed: []NotParsed{}}
	if win > 0 {
		pr.RatePerS = float64(ps.Requests) / win
	}
	for k, v := range ps.Status {
		pr.Status[fmt.Sprint(k)] = v
	}
	for k, v := range ps.Routes {
		pr.Routes = append(pr.Routes, RouteReport{Route: k, Requests: v.Requests, Errors: v.Errors,
			Client4xx: v.Client4xx, Duration: summarise(&v.Dur)})
	}
	sort.Slice(pr.Routes, func(i, j int) bool {
		if pr.Routes[i].Requests != pr.Routes[j].Requests {
			return pr.Routes[i].Requests > pr.Routes[j].Requests
		}
		return pr.Routes[i].Route < pr.Routes[j].Route
	})
	var np uint64
	for k, v := range ps.NotParsed {
		pr.NotParsed = append(pr.NotParsed, NotParsed{Why: k, Connections: v})
		np += v
	}
	sort.Slice(pr.NotParsed, func(i, j int) bool { return pr.NotParsed[i].Why < pr.NotParsed[j].Why })
	switch {
	case ps.HTTPConns > 0 && np > 0:
		pr.Proto = "mixed"
	case ps.HTTPConns > 0 || ps.Requests > 0:
		pr.Proto = "http"
	case np > 0:
		pr.Proto = "other"
	default:
		pr.Proto = "none"
	}
	pr.Conns = ConnReport{Opened: ps.ConnOpened, Closed: ps.ConnClosed, Open: open, Resets: ps.ConnResets,
		BytesIn: ps.BytesIn, BytesOut: ps.BytesOut, Duration: summarise(&ps.ConnDur)}
	if win > 0 {
		pr.Conns.RatePerS = float64(ps.ConnOpened) / win
	}
	return pr
}

// buildWorkers lists a port's processes, most requests first.
func buildWorkers(ps *PortStats) []WorkerReport {
	out := []WorkerReport{}
	for pid, w := range ps.Workers {
		out = append(out, WorkerReport{Pid: pid, Requests: w.Requests, Errors: w.Errors, ErrorPct: pct(w.Errors, w.Requests),
			Client4xx: w.Client4xx, Duration: summarise(&w.Dur)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Requests != out[j].Requests {
			return out[i].Requests > out[j].Requests
		}
		return out[i].Pid < out[j].Pid
	})
	return out
}

// WriteJSON writes the report; indent for a whole-window report, one line
// per interval in live mode.
func WriteJSON(w io.Writer, r *Result, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(r)
}

func fmtMs(v float64) string {
	d := time.Duration(v * 1e6)
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0fms", v)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", v)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.0fµs", v*1000)
}

func fmtBytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// WriteText writes the human table.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	if r.ProcessCounts != nil {
		fmt.Fprintf(&b, "pid %d and its set (%d processes): RED per listening port, across processes, over %.2f s\n\n", r.Pid, r.ProcessCounts.Seen, r.WindowS)
	} else {
		fmt.Fprintf(&b, "pid %d: RED per listening port over %.2f s\n\n", r.Pid, r.WindowS)
	}
	if len(r.Ports) == 0 {
		b.WriteString("no listening TCP sockets seen (none at the start, no accept during the window)\n")
	} else {
		fmt.Fprintf(&b, "%-6s %-6s %9s %7s %6s %8s %8s %8s %8s %8s %s\n",
			"PORT", "PROTO", "REQ/S", "ERR%", "4XX%", "P50", "P90", "P99", "MAX", "INFLIGHT", "QUEUE p50/p99")
	}
	for _, p := range r.Ports {
		if p.Requests > 0 || p.Proto == "http" || p.Proto == "mixed" {
			q := "-"
			if p.Queue != nil {
				q = fmtMs(p.Queue.P50Ms) + "/" + fmtMs(p.Queue.P99Ms)
			}
			d := durCells(p.Duration)
			fmt.Fprintf(&b, "%-6d %-6s %9.1f %7.2f %6.2f %8s %8s %8s %8s %8d %s\n", p.Port, p.Proto, p.RatePerS,
				p.ErrorPct, p.Client4xxPc, d[0], d[1], d[2], d[3], p.InFlight, q)
		} else {
			fmt.Fprintf(&b, "%-6d %-6s %9s (connection level below)\n", p.Port, p.Proto, "-")
		}
		if p.Requests > 0 {
			fmt.Fprintf(&b, "       %d requests: %d errors", p.Requests, p.Errors)
			var st []string
			for k, v := range p.Status {
				if k >= "500" {
					st = append(st, fmt.Sprintf("%s ×%d", k, v))
				}
			}
			for k, v := range p.Aborted {
				st = append(st, fmt.Sprintf("%s ×%d", k, v))
			}
			sort.Strings(st)
			if len(st) > 0 {
				b.WriteString(" (" + strings.Join(st, ", ") + ")")
			}
			fmt.Fprintf(&b, ", %d 4xx\n", p.Client4xx)
			for i, rt := range p.Routes {
				if i == 8 {
					fmt.Fprintf(&b, "       … %d more routes (--format json lists them)\n", len(p.Routes)-8)
					break
				}
				fmt.Fprintf(&b, "       %-32s %7d req %6.2f%% err  ", rt.Route, rt.Requests, pct(rt.Errors, rt.Requests))
				if d := rt.Duration; d != nil {
					fmt.Fprintf(&b, "p50 %s  p99 %s  max %s\n", fmtMs(d.P50Ms), fmtMs(d.P99Ms), fmtMs(d.MaxMs))
				} else {
					b.WriteString("(no response)\n") // aborted before a response byte: no duration, not 0
				}
			}
		}
		writeWorkers(&b, r, p)
		c := p.Conns
		fmt.Fprintf(&b, "       connections: %.1f/s (%d opened, %d closed, %d open, %d reset), in %s, out %s",
			c.RatePerS, c.Opened, c.Closed, c.Open, c.Resets, fmtBytes(c.BytesIn), fmtBytes(c.BytesOut))
		if c.Duration != nil {
			fmt.Fprintf(&b, ", duration p50 %s p99 %s max %s", fmtMs(c.Duration.P50Ms), fmtMs(c.Duration.P99Ms), fmtMs(c.Duration.MaxMs))
		}
		b.WriteString("\n")
		for _, np := range p.NotParsed {
			fmt.Fprintf(&b, "       not parsed: %s (%d connections)\n", np.Why, np.Connections)
		}
	}
	if len(r.Slowest) > 0 {
		b.WriteString("\nslowest requests (stack: the one most often seen while in flight):\n")
		for i, s := range r.Slowest {
			what := fmt.Sprint(s.Status)
			if s.Error != "" {
				what = s.Error
			}
			if s.Pid != 0 {
				fmt.Fprintf(&b, "%3d. %8s  %s %s → %s  (port %d, pid %d, tid %d, at +%.2fs)\n", i+1, fmtMs(s.DurationMs), s.Method, s.Path, what, s.Port, s.Pid, s.Tid, s.StartS)
			} else {
				fmt.Fprintf(&b, "%3d. %8s  %s %s → %s  (port %d, tid %d, at +%.2fs)\n", i+1, fmtMs(s.DurationMs), s.Method, s.Path, what, s.Port, s.Tid, s.StartS)
			}
			if len(s.Stack) > 0 {
				fmt.Fprintf(&b, "       seen %d times in %d kernel samples (ticks, waits in periods) and %d stack reads (stack from %s):\n", s.StackSeen, s.StackSamples, s.StackReads, s.StackSource)
				for _, f := range s.Stack {
					fmt.Fprintf(&b, "         %s (%s:%d)\n", f.Function, f.File, f.Line)
				}
			} else if s.StackReads == 0 && s.StackSamples == 0 {
				b.WriteString("       (no stack: it finished within one poll period)\n")
			}
		}
	}
	writeProcesses(&b, r)
	for _, n := range r.Notes {
		b.WriteString("\nnote: " + n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	d := r.Drops
	fmt.Fprintf(&b, "\nevents %d, drops %d (ring full %d, entry map full %d), entries not seen %d, copy failures %d; stack reads %d (failed %d); observer CPU %.2f s\n",
		r.Events, d.RingFull+d.EnterFull+d.Decode, d.RingFull, d.EnterFull, d.NoEnter, d.CopyFailed, r.StackReads, r.StackFail, r.ObserverS)
	if k := r.Sampling; k != nil && k.Engine == "bpf" {
		fmt.Fprintf(&b, "stacks: walked in the kernel at %d Hz ticks on %d CPUs and at switch-outs: %d ticks, %d switch-outs, %d waits; %d walked whole, %d truncated, %d faulted, %d invalid, %d without Python, %d lost; %d ticks and %d waits joined to a request, %d ticks outside one\n",
			k.RequestedHz, k.CPUs, k.Samples, k.SwitchOuts, k.Waits, k.Walked, k.Truncated, k.Faulted, k.Invalid, k.NoPython+k.NoFrame, k.Lost, k.Joined, k.JoinedWaits, k.Outside)
		if k.BPFNSPerSample > 0 || k.BPFNSPerSwitch > 0 {
			fmt.Fprintf(&b, "kernel walk cost: %.1f µs per tick, %.1f µs per switch (bpf stats %s)\n", k.BPFNSPerSample/1e3, k.BPFNSPerSwitch/1e3, k.BPFStats)
		}
	} else if k != nil {
		fmt.Fprintf(&b, "stacks: user-space reads only (kernel sampling off: %s)\n", k.Fallback)
	}
	fmt.Fprintf(&b, "quantiles are bucket midpoints (±%.1f %%); max is exact. price: %s\n", r.QuantErr, r.Price)
	_, err := io.WriteString(w, b.String())
	return err
}

// durCells are a port's p50, p90, p99 and max cells: "-" when no request
// had a response byte (all aborted: their duration is unknown, not 0).
func durCells(d *Durations) [4]string {
	if d == nil {
		return [4]string{"-", "-", "-", "-"}
	}
	return [4]string{fmtMs(d.P50Ms), fmtMs(d.P90Ms), fmtMs(d.P99Ms), fmtMs(d.MaxMs)}
}

// writeWorkers is a port's per-process lines (a set only).
func writeWorkers(b *strings.Builder, r *Result, p PortReport) {
	if len(p.Workers) == 0 {
		return
	}
	argv := map[int][]string{}
	for _, m := range r.Processes {
		argv[m.Pid] = m.Argv
	}
	fmt.Fprintf(b, "       per process (the one that accepted the connection):\n")
	for _, w := range p.Workers {
		fmt.Fprintf(b, "         [pid %d] %-40s %7d req %6d err (%5.2f%%) %5d 4xx  ", w.Pid,
			ShortArgv(argv[w.Pid], 40), w.Requests, w.Errors, w.ErrorPct, w.Client4xx)
		if d := w.Duration; d != nil {
			fmt.Fprintf(b, "p50 %s  p90 %s  p99 %s  max %s\n", fmtMs(d.P50Ms), fmtMs(d.P90Ms), fmtMs(d.P99Ms), fmtMs(d.MaxMs))
		} else {
			b.WriteString("(no response)\n")
		}
	}
}

// writeProcesses is the set's account (a set only).
func writeProcesses(b *strings.Builder, r *Result) {
	c := r.ProcessCounts
	if c == nil {
		return
	}
	fmt.Fprintf(b, "\nprocesses: %d seen, %d joined late, %d exited", c.Seen, c.Late, c.Exited)
	if c.Full > 0 {
		fmt.Fprintf(b, ", %d refused (the set's map was full)", c.Full)
	}
	if c.Lost > 0 {
		fmt.Fprintf(b, ", %d join/exit events lost (the account may be short)", c.Lost)
	}
	b.WriteString("\n")
	for i, m := range r.Processes {
		if i == 32 {
			fmt.Fprintf(b, "  … %d more (--format json lists them)\n", len(r.Processes)-32)
			break
		}
		how := string(m.How)
		if m.Parent != 0 {
			how += fmt.Sprintf(" of %d", m.Parent)
		}
		if m.Exited {
			how += ", exited"
		}
		fmt.Fprintf(b, "  [pid %d] %s (%s)\n", m.Pid, ShortArgv(m.Argv, 60), how)
	}
}

// ShortArgv is procset.ShortArgv with the program by its base name, "?"
// for no command line.
func ShortArgv(argv []string, n int) string {
	if len(argv) > 0 {
		argv = append([]string{filepath.Base(argv[0])}, argv[1:]...)
	}
	if s := procset.ShortArgv(argv, n); s != "" {
		return s
	}
	return "?"
}

// EndedNote is the stderr line when -d ended the measurement of a spawned
// program that was still running: pyobs ended it too, and exits 0 (the
// window ran its course), not with the program's status.
func EndedNote(pid int, d time.Duration, code int) string {
	return fmt.Sprintf("pyobs red: the -d %s window ended while the program (pid %d) was still running: pyobs ended it (exit status %d, not passed on)", d, pid, code)
}
