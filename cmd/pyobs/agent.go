package main

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/agent"
	"github.com/pyobs/pyobs/internal/agent/export"
	"github.com/pyobs/pyobs/internal/session"
)

type agentFlags struct {
	window    time.Duration
	freq      int
	duration  time.Duration
	engine    string
	offcpu    bool
	offWindow time.Duration
	red       bool
	noStat    bool
	otlp      []string
	pyroscope []string
	metrics   string
	labels    []string
	service   string
	queue     int
}

func newAgent(g *globals) *cobra.Command {
	var f agentFlags
	c := &cobra.Command{
		Use:   "agent -p PID [--otlp URL] [--pyroscope URL] [--metrics ADDR] [--label k=v]",
		Short: "Always-on: a low-rate CPU profile and stat's counters in rolling windows, exported to OTLP, Pyroscope, Prometheus (sampling: ~0.5 %)",
		Long: `agent observes a running Python process continuously, in rolling windows
(--window, 15 s): a CPU profile at a low rate (-F, 19 Hz; record's cpu mode),
stat's counters and verdicts, and with --offcpu an off-CPU profile. Each
window is exported, then dropped: memory stays bounded however long it runs.
Ctrl-C or SIGTERM cuts the window in the making and exports it. With
--children, several -p, --cgroup or --all it observes the set: stacks start
at their process ([pid N] argv), stat's counters are the set's totals.

Exporters (each may repeat):
  --otlp URL       OTLP profiles to an OpenTelemetry Collector: OTLP/HTTP
                   (http://HOST:4318; the path defaults to
                   ` + export.OTLPProfilesPath + `) or OTLP/gRPC
                   (grpc://HOST:4317, grpcs:// for TLS); the collector
                   needs --feature-gates=service.profilesSupport
  --pyroscope URL  pprof to Pyroscope's /ingest (name{labels}, from, until)
  --metrics ADDR   serve Prometheus /metrics on ADDR (e.g. 127.0.0.1:9464):
                   stat's counters, verdicts as gauges, pyobs's own cost
                   (observer CPU, samples, lost, export drops); with --red
                   also red's pyobs_red_requests_total, _errors_total,
                   _client_errors_total and the duration histogram
                   pyobs_red_request_duration_seconds per port and route
A sink that is down or slow is retried with backoff behind a small queue;
windows it can't take are dropped and counted
(pyobs_export_dropped_windows_total), and sampling never waits for it.

-o and --format are refused (exit 2): the agent writes nothing but its
exports. A malformed --metrics address is refused at once (exit 2); one that
can't be bound ends the agent with exit 1.

Resource: service.name (--service, else the script's or module's name),
host.name, process.pid, process.command, process.runtime.version, and every
--label k=v.

Price: record's at 19 Hz plus one engine start per window (the bpf engine's
load: ~0.1 s of CPU per window); stat is free.
Cannot see: the few ms (perf) to ~0.1 s (bpf) between two windows; what
record, stat and offcpu cannot.`,
		Example: `  pyobs agent -p 4242 --metrics 127.0.0.1:9464
  pyobs agent -p 4242 --children --pyroscope http://127.0.0.1:4040
  pyobs agent -p 4242 --otlp http://127.0.0.1:4318 --label env=prod
  pyobs agent -p 4242 --pyroscope http://127.0.0.1:4040 --window 10s`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case cmd.ArgsLenAtDash() >= 0:
				return usagef("agent: observes running processes (-p PID, --cgroup, --all), not a command: start it, then give its pid")
			case len(args) > 0:
				return usagef("agent: unexpected argument %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runAgent(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVar(&f.window, "window", agent.DefaultWindow, "length of each exported window")
	fl.IntVarP(&f.freq, "freq", "F", agent.DefaultFreq, "CPU samples per second (of CPU time per thread)")
	fl.DurationVarP(&f.duration, "duration", "d", 0, "stop after this long (0, the default: until Ctrl-C, SIGTERM or the target exits)")
	fl.StringVar(&f.engine, "engine", "auto", "record's cpu-mode engine: auto (bpf, else perf), bpf or perf")
	fl.BoolVar(&f.offcpu, "offcpu", false, "also export an off-CPU profile, one per --offcpu-window")
	fl.DurationVar(&f.offWindow, "offcpu-window", 0, "span of each off-CPU profile (default: 20 windows, 5m at 15s windows; offcpu's engine start, ~0.15 s of CPU, is paid once per span)")
	fl.BoolVar(&f.red, "red", false, "also run red (tracing the socket syscalls: costs per request) and serve its request, error and duration metrics on --metrics")
	fl.BoolVar(&f.noStat, "no-stat", false, "leave stat's counters out")
	fl.StringArrayVar(&f.otlp, "otlp", nil, "export OTLP profiles to this endpoint: http://HOST:4318 or grpc://HOST:4317 (repeatable)")
	fl.StringArrayVar(&f.pyroscope, "pyroscope", nil, "export pprof to this Pyroscope server (repeatable)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus /metrics on this address (host:port)")
	fl.StringArrayVar(&f.labels, "label", nil, "k=v added to every export (repeatable)")
	fl.StringVar(&f.service, "service", "", "service.name (default: the script's or module's name)")
	fl.IntVar(&f.queue, "queue", 4, "windows kept per sink while it is down (older ones are dropped and counted)")
	return c
}

var labelKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`) })

func parseLabels(in []string) ([]export.Label, error) {
	var out []export.Label
	seen := map[string]bool{}
	for _, l := range in {
		k, v, ok := strings.Cut(l, "=")
		if !ok || !labelKey().MatchString(k) {
			return nil, fmt.Errorf("agent: --label %q: want KEY=VALUE, KEY of letters, digits, '_' and '.'", l)
		}
		if strings.ContainsAny(v, ",{}\"\n") {
			return nil, fmt.Errorf("agent: --label %q: a value can't hold , { } \" or a newline", l)
		}
		if seen[k] {
			return nil, fmt.Errorf("agent: --label %q: %s given twice", l, k)
		}
		if slices.Contains(export.ReservedLabels, k) {
			return nil, fmt.Errorf("agent: --label %q: %s is a label of pyobs's own (reserved: %s)", l, k, strings.Join(export.ReservedLabels, ", "))
		}
		seen[k] = true
		out = append(out, export.Label{Key: k, Value: v})
	}
	return out, nil
}

func runAgent(cmd *cobra.Command, g *globals, f *agentFlags, args []string) error {
	switch {
	case g.pid == 0 && len(g.pids) == 0 && g.cgroup == "" && !g.all:
		return usagef("agent: no target: give -p PID")
	case g.pid < 0:
		return usagef("invalid pid %d", g.pid)
	case f.freq <= 0 || f.freq > 1000:
		return usagef("agent: -F %d is outside 1..1000 (the agent is the low-rate mode: use record for more)", f.freq)
	case f.window < 100*time.Millisecond:
		return usagef("agent: --window %v is too short (at least 100ms)", f.window)
	case f.duration < 0:
		return usagef("agent: --duration must not be negative")
	case f.engine != "auto" && f.engine != "bpf" && f.engine != "perf":
		return usagef("agent: unknown --engine %q (auto, bpf, perf)", f.engine)
	case f.queue < 1 || f.queue > 1000:
		return usagef("agent: --queue %d is outside 1..1000", f.queue)
	case g.format != "":
		return usagef("agent: --format does nothing here: the agent exports each window to --otlp, --pyroscope or --metrics")
	case g.output != "":
		return usagef("agent: -o does nothing here: the agent exports each window to --otlp, --pyroscope or --metrics")
	case len(f.otlp) == 0 && len(f.pyroscope) == 0 && f.metrics == "":
		return usagef("agent: nowhere to export: give --otlp URL, --pyroscope URL or --metrics ADDR")
	case f.offWindow < 0 || f.offWindow > 0 && !f.offcpu:
		return usagef("agent: --offcpu-window takes a positive duration, with --offcpu")
	case f.offWindow > 0 && f.offWindow < time.Second:
		// Each span starts offcpu's engine anew (~0.15 s of CPU): a
		// shorter span would cost more than a core.
		return usagef("agent: --offcpu-window %v is too short (at least 1s: each span loads offcpu's engine, ~0.15 s of CPU)", f.offWindow)
	case f.red && f.metrics == "":
		return usagef("agent: --red's request, error and duration metrics are served on /metrics: give --metrics ADDR")
	}
	if f.metrics != "" {
		if err := listenAddr(f.metrics); err != nil {
			return usagef("agent: --metrics %q: %v", f.metrics, err)
		}
	}
	if strings.ContainsAny(f.service, ",{}\"\n") {
		return usagef("agent: --service %q can't hold , { } \" or a newline", f.service)
	}
	labels, err := parseLabels(f.labels)
	if err != nil {
		return usageError{err}
	}
	var sinks []export.Sink
	for _, u := range f.otlp {
		s, err := export.NewOTLP(u)
		if err != nil {
			return usagef("agent: %w", err)
		}
		sinks = append(sinks, s)
	}
	for _, u := range f.pyroscope {
		s, err := export.NewPyroscope(u)
		if err != nil {
			return usagef("agent: %w", err)
		}
		sinks = append(sinks, s)
	}
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	logf := func(l string) { fmt.Fprintln(os.Stderr, "pyobs agent:", l) }
	a, err := agent.Start(s, agent.Options{Window: f.window, Freq: f.freq, Engine: f.engine, OffCPU: f.offcpu, OffWindow: f.offWindow, RED: f.red, NoStat: f.noStat,
		Duration: f.duration, ServiceName: f.service, Labels: labels, Sinks: sinks, Queue: export.QueueOptions{Len: f.queue},
		Metrics: f.metrics, Log: logf, SetAsked: setAsked(cmd, g)})
	if err != nil {
		return err
	}
	r := a.Resource()
	who := fmt.Sprintf("pid %d", s.Pid)
	if s.Set.Many() {
		who = fmt.Sprintf("pid %d and the rest of its set (%s; stacks rooted at their process)", s.Pid, s.Set.Describe())
	}
	logf(fmt.Sprintf("%s (service.name %s, Python %s): %v windows at %d Hz", who, r.ServiceName, r.RuntimeVersion, f.window, f.freq))
	if addr := a.MetricsAddr(); addr != "" {
		logf("serving /metrics on http://" + addr + "/metrics")
	}
	st, err := a.Wait(ctx)
	if st != nil {
		line := fmt.Sprintf("%d windows, %d samples (lost %d), observer CPU %.2fs", st.Windows, st.Samples, st.Lost, st.ObserverCPU.Seconds())
		for name, q := range st.Sinks {
			line += fmt.Sprintf("; %s: sent %d, dropped %d, failed attempts %d", name, q.Sent, q.Dropped, q.Failed)
		}
		logf(line)
	}
	return err
}

// listenAddr checks an address to serve on before anything is observed:
// HOST:PORT, the host may be empty (every address), the port a number (or
// a service name, as net.Listen takes). One
// that is well formed but can't be bound stays a runtime error.
func listenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want HOST:PORT (e.g. 127.0.0.1:9464, or :9464 for every address)")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number in 0..65535 nor a service name", port)
	}
	return nil
}
