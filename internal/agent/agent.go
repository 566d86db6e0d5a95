package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pyobs/pyobs/internal/agent/export"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/stat"
)

// Defaults of the agent.
const (
	DefaultWindow = 15 * time.Second
	DefaultFreq   = 19
)

// Options of an agent run.
type Options struct {
	Window time.Duration // rolling window (DefaultWindow when 0)
	Freq   int           // CPU samples per second (DefaultFreq when 0)
	Engine string        // record's cpu-mode engine: auto, bpf, perf
	OffCPU bool          // also an off-CPU profile, one per OffWindow
	// OffWindow is the off-CPU profile's span (default: 20 windows, as a
	// CPU recording's segment: 5 min at 15 s): offcpu's engine start
	// (~0.15 s of CPU, the verifier's load) is paid once per span.
	OffWindow time.Duration
	// RED also runs red (tracing the target's socket syscalls) for the
	// whole run: its per-window counts and duration histograms go to
	// /metrics (Metrics must be set).
	RED    bool
	NoStat bool // leave stat's counters out
	// Duration ends the run after this long (0: until ctx ends or the
	// target exits).
	Duration time.Duration
	// ServiceName overrides the default (the script's or module's name).
	ServiceName string
	Labels      []export.Label
	// Sinks are the push exporters (each behind its own bounded Queue);
	// Metrics, when set, is fed every window.
	Sinks []export.Sink
	Queue export.QueueOptions
	// Metrics is where /metrics listens ("" for none): host:port.
	Metrics string
	// Flush bounds how long the last windows may take to reach the sinks
	// at the end (default 5 s).
	Flush time.Duration
	// OnWindow sees each window after it was handed to the sinks (logs,
	// tests); it must not keep it.
	OnWindow func(*export.Window)
	// Log receives one-line notes (engine fallbacks, sink errors).
	Log func(string)
	// SetAsked: the session's set was asked for (several -p, --children,
	// --cgroup, --all): the CPU profile needs the bpf engine, which
	// observes sets (the perf engine would see the first process alone).
	SetAsked bool
}

// Stats is the agent's account of a run.
type Stats struct {
	Windows, Samples, Lost, Torn uint64
	ObserverCPU                  time.Duration
	Sinks                        map[string]export.QueueStats
}

// Agent is a running agent (Start); Run is Start + Wait.
type Agent struct {
	s     *session.Session
	opt   Options
	res   *export.Resource
	qs    []*export.Queue
	prom  *export.Prom
	cpu0  time.Duration
	start time.Time

	cpu                          *cpuRec
	off                          *offRec
	windows, samples, lost, torn atomic.Uint64
	redReports                   atomic.Uint64
	logMu                        sync.Mutex
	lastLog                      map[string]time.Time
}

// Run observes s window after window until ctx ends (Ctrl-C, SIGTERM: the
// window in the making is cut there and exported), opt.Duration passes or
// the target exits.
func Run(ctx context.Context, s *session.Session, opt Options) (*Stats, error) {
	a, err := Start(s, opt)
	if err != nil {
		return nil, err
	}
	return a.Wait(ctx)
}

// Start checks the options, builds the resource and opens the sinks
// (the /metrics listener included), without observing yet.
func Start(s *session.Session, opt Options) (*Agent, error) {
	if opt.Window == 0 {
		opt.Window = DefaultWindow
	}
	if opt.Freq == 0 {
		opt.Freq = DefaultFreq
	}
	if opt.Window < 100*time.Millisecond {
		return nil, fmt.Errorf("a window of %v is too short (at least 100ms)", opt.Window)
	}
	if opt.Freq < 0 {
		return nil, fmt.Errorf("the sampling rate must be positive, not %d", opt.Freq)
	}
	if opt.RED && opt.Metrics == "" {
		return nil, fmt.Errorf("red's metrics go to /metrics: give --metrics ADDR with --red")
	}
	if opt.OffWindow <= 0 {
		opt.OffWindow = segmentWindows * opt.Window
	}
	if opt.Flush <= 0 {
		opt.Flush = 5 * time.Second
	}
	if opt.Queue.MaxAge == 0 {
		n := opt.Queue.Len
		if n <= 0 {
			n = 4 // the queue's default
		}
		opt.Queue.MaxAge = max(time.Minute, time.Duration(n+1)*opt.Window)
	}
	a := &Agent{s: s, opt: opt, cpu0: clock.ObserverCPU(), lastLog: map[string]time.Time{}}
	a.res = Resource(s, opt.ServiceName, opt.Labels)
	qo := opt.Queue
	qo.OnError = func(sink string, err error) { a.logf("export to %s: %v", sink, err) }
	for _, sk := range opt.Sinks {
		a.qs = append(a.qs, export.NewQueue(sk, qo))
	}
	if opt.Metrics != "" {
		p, err := export.NewProm(opt.Metrics, a.res, a.own)
		if err != nil {
			a.closeQueues(context.Background())
			return nil, err
		}
		a.prom = p
	}
	return a, nil
}

// MetricsAddr is where /metrics listens ("" without --metrics).
func (a *Agent) MetricsAddr() string {
	if a.prom == nil {
		return ""
	}
	return a.prom.Addr()
}

// Resource is the resource the agent exports under.
func (a *Agent) Resource() *export.Resource { return a.res }

func (a *Agent) logf(format string, args ...any) {
	if a.opt.Log == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	// One line per kind of message per minute: a dead sink is said, not
	// shouted. The kind is the format with its first argument when that is
	// a name (a sink's URL: each sink's own errors), not a number (a
	// window's).
	key := format
	if len(args) > 0 {
		if name, ok := args[0].(string); ok {
			key += "\x00" + name
		}
	}
	a.logMu.Lock()
	last, seen := a.lastLog[key]
	if seen && time.Since(last) < time.Minute {
		a.logMu.Unlock()
		return
	}
	a.lastLog[key] = time.Now()
	a.logMu.Unlock()
	a.opt.Log(msg)
}

func (a *Agent) own() export.Own {
	st := a.stats()
	return export.Own{ObserverCPU: st.ObserverCPU, Samples: st.Samples, Lost: st.Lost, Torn: st.Torn, Windows: st.Windows, Sinks: st.Sinks}
}

func (a *Agent) stats() *Stats {
	st := &Stats{Windows: a.windows.Load(), Samples: a.samples.Load(), Lost: a.lost.Load(), Torn: a.torn.Load(),
		ObserverCPU: clock.ObserverCPU() - a.cpu0, Sinks: map[string]export.QueueStats{}}
	for _, q := range a.qs {
		st.Sinks[q.Sink().Name()] = q.Stats()
	}
	return st
}

func (a *Agent) closeQueues(ctx context.Context) {
	var wg sync.WaitGroup
	for _, q := range a.qs {
		wg.Add(1)
		go func() { defer wg.Done(); q.Close(ctx) }()
	}
	wg.Wait()
}

// Wait runs the windows until ctx ends, Duration passes or the target
// exits, flushes the last ones and closes the sinks.
func (a *Agent) Wait(ctx context.Context) (*Stats, error) {
	a.start = time.Now()
	runCtx := ctx
	if a.opt.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, a.opt.Duration)
		defer cancel()
	}
	// red runs until the windows end (not only until runCtx does: the
	// target may exit first).
	redCtx, stopRED := context.WithCancel(runCtx)
	defer stopRED()
	var redDone chan struct{}
	if a.opt.RED {
		redDone = make(chan struct{})
		go func() {
			defer close(redDone)
			a.runRED(redCtx)
		}()
	}
	if a.opt.OffCPU {
		a.off = startOff(runCtx, a.s, a.opt.OffWindow)
	}
	a.cpu = startCPU(runCtx, a.s, record.Options{Mode: "cpu", Freq: a.opt.Freq, Engine: a.opt.Engine, SetRequired: a.opt.SetAsked,
		OnFallback: func(l string) { a.logf("record: %s", l) }}, a.opt.Window)
	var err error
	for seq := uint64(1); ; seq++ {
		var w *export.Window
		w, err = a.window(runCtx, seq)
		if w != nil {
			a.deliver(w)
		}
		if err != nil || runCtx.Err() != nil || !a.s.Alive() {
			break
		}
	}
	stopRED()
	if redDone != nil {
		<-redDone
	}
	fctx, cancel := context.WithTimeout(context.Background(), a.opt.Flush)
	defer cancel()
	a.closeQueues(fctx)
	st := a.stats()
	if a.prom != nil {
		_ = a.prom.Close(fctx)
	}
	if err != nil && a.windows.Load() > 0 && !a.s.Alive() {
		err = nil // the target ended: the windows so far were delivered
	}
	return st, err
}

// runRED streams red's reports, one per window, into /metrics until ctx
// ends; red that can't run is said once and the agent goes on without it.
func (a *Agent) runRED(ctx context.Context) {
	err := red.Stream(ctx, a.s, red.Options{Interval: a.opt.Window, Poll: time.Second}, func(r *red.Result) error {
		if a.prom != nil {
			a.prom.ObserveRED(r)
		}
		a.redReports.Add(1)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		a.logf("red: %v (no red metrics from here on)", err)
	}
}

func (a *Agent) deliver(w *export.Window) {
	a.windows.Add(1)
	if w.CPU != nil {
		m := w.CPU.Meta
		a.samples.Add(m.Samples)
		a.lost.Add(m.Lost)
		a.torn.Add(m.Torn)
	}
	if a.prom != nil {
		a.prom.Observe(w)
	}
	for _, q := range a.qs {
		q.Put(w)
	}
	if a.opt.OnWindow != nil {
		a.opt.OnWindow(w)
	}
	// The window's engines are gone: give their memory back now rather
	// than at the collector's leisure, so the RSS stays flat window after
	// window (a collection of a small heap: ms per window).
	debug.FreeOSMemory()
}

// window observes one window: record, stat and (with OffCPU) offcpu side
// by side over the same span, each ended by the window's length or ctx.
func (a *Agent) window(ctx context.Context, seq uint64) (*export.Window, error) {
	w := &export.Window{Seq: seq, Start: time.Now(), Resource: a.res}
	dur := a.opt.Window
	if a.opt.Duration > 0 {
		if left := a.opt.Duration - time.Since(a.start); left < dur {
			dur = max(left, 10*time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	var recErr, statErr, offErr error
	var cpu *flame.Profile
	var st *report.Stat
	var off *flame.Profile
	// The window's span: stat and offcpu run for it; without them, a wait.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-time.After(dur):
		case <-ctx.Done():
		case <-a.cpu.done:
		}
	}()
	if !a.opt.NoStat {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Thread states polled three times a window (each poll reads
			// every thread's stat and status).
			so := stat.Options{Duration: dur, Poll: max(time.Second, a.opt.Window/3)}
			if a.s.Set.Many() {
				// The set measured as one process: counters summed over
				// its members, every thread.
				var r *stat.SetStat
				if r, statErr = stat.RunSet(ctx, a.s, so); r != nil {
					st = r.Total
				}
				return
			}
			var r *stat.Result
			if r, statErr = stat.Run(ctx, a.s, so); r != nil {
				st = r.Stat
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil || !a.s.Alive() {
		// The last window: the recording's end folds what its ring
		// still held; take that too.
		select {
		case <-a.cpu.done:
		case <-time.After(2 * time.Second):
		}
	}
	cpu, recErr = a.cpu.cut()
	if a.off != nil {
		last := ctx.Err() != nil || !a.s.Alive()
		var offStart time.Time
		off, offStart, offErr = a.off.take(last)
		w.OffStart = offStart
	}
	w.End = time.Now()
	w.CPU, w.Stat, w.OffCPU = cpu, st, off
	if statErr != nil {
		a.logf("stat: window %d: %v", seq, statErr)
	}
	if offErr != nil {
		a.logf("offcpu: window %d: %v", seq, offErr)
	}
	if recErr != nil {
		if !a.s.Alive() {
			recErr = fmt.Errorf("pid %d: %w", a.s.Pid, session.ErrExited)
		}
		if cpu == nil && st == nil {
			return nil, fmt.Errorf("can't observe pid %d (window %d): %w", a.s.Pid, seq, recErr)
		}
		a.logf("record: window %d: %v", seq, recErr)
		if seq == 1 && cpu == nil {
			return w, fmt.Errorf("can't record pid %d: %w", a.s.Pid, recErr)
		}
	}
	return w, nil
}

// Resource names the process: service.name from override, else the
// script's or module's name (python app.py → app, python -m pkg.mod →
// pkg.mod), else the command's name.
func Resource(s *session.Session, service string, labels []export.Label) *export.Resource {
	r := &export.Resource{Pid: s.Pid, Labels: append([]export.Label(nil), labels...)}
	export.SortLabels(r.Labels)
	r.HostName, _ = os.Hostname()
	if s.Py != nil {
		r.RuntimeVersion = s.Py.Version().String()
	}
	argv := cmdline(s)
	if len(argv) > 0 {
		r.Command = argv[0]
	}
	r.ServiceName = service
	if r.ServiceName == "" {
		r.ServiceName = ServiceName(argv)
	}
	if r.ServiceName == "" {
		if comm, err := os.ReadFile(s.FS.Path(s.Pid, "comm")); err == nil {
			r.ServiceName = strings.TrimSpace(string(comm))
		}
	}
	if r.ServiceName == "" {
		r.ServiceName = "python"
	}
	return r
}

func cmdline(s *session.Session) []string {
	b, err := os.ReadFile(s.FS.Path(s.Pid, "cmdline"))
	if err != nil {
		return nil
	}
	b = []byte(strings.TrimRight(string(b), "\x00"))
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// ServiceName is the script's or module's name in a Python command line,
// "" when it has neither (python -c, an interactive interpreter, an
// embedding program).
func ServiceName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	base := filepath.Base(argv[0])
	if !strings.HasPrefix(base, "python") && !strings.HasPrefix(base, "pypy") {
		// A console script or an embedding program: its own name.
		return base
	}
	for i := 1; i < len(argv); i++ {
		arg := argv[i]
		switch {
		case arg == "-m" && i+1 < len(argv):
			return argv[i+1]
		case strings.HasPrefix(arg, "-m") && len(arg) > 2:
			return arg[2:]
		case arg == "-c":
			return ""
		case arg == "-W" || arg == "-X" || arg == "--check-hash-based-pycs":
			i++ // the option's argument
		case arg == "-" || arg == "--":
			if arg == "--" && i+1 < len(argv) {
				return script(argv[i+1])
			}
			return ""
		case strings.HasPrefix(arg, "-"):
		default:
			return script(arg)
		}
	}
	return ""
}

func script(path string) string {
	base := filepath.Base(path)
	if base == "__main__.py" {
		return filepath.Base(filepath.Dir(path))
	}
	return strings.TrimSuffix(base, ".py")
}
