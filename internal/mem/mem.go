package mem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/remoteexec"
	"github.com/pyobs/pyobs/internal/session"
)

// Engines.
const (
	EngineAuto        = "auto"
	EngineTracemalloc = "tracemalloc"
	EngineProbe       = "probe"
)

// Options of one window.
type Options struct {
	Duration time.Duration
	Engine   string
	Frames   int // tracemalloc's traceback limit when pyobs starts it
	Top      int // sites listed by size and by count, and at most in growth
	// MinGrowthShare: a site enters the growth list when it grew at least
	// this share of the window's total growth (and at least 1 KiB); the
	// rest is summed in GrowthOther.
	MinGrowthShare float64
	// Timeout: how long each script may take to reach a safe point.
	Timeout time.Duration
	Tid     int // the thread that runs the scripts (0: main)
	Nudge   bool
	// SampleBytes (probe): keep an allocation of s bytes with probability
	// s/SampleBytes (0: DefaultSampleBytes; 1: every one).
	SampleBytes uint64
	// Native (probe): each kept allocation's native stack too, merged with
	// its Python stack.
	Native bool
}

// Validate checks the options a user gives.
func (o *Options) Validate() error {
	switch o.Engine {
	case "", EngineAuto, EngineTracemalloc, EngineProbe:
	default:
		return fmt.Errorf("mem: unknown --engine %q (auto, tracemalloc, probe)", o.Engine)
	}
	if o.Duration <= 0 {
		return fmt.Errorf("mem: --duration must be positive, got %v", o.Duration)
	}
	if o.Frames < 1 || o.Frames > 1000 {
		return fmt.Errorf("mem: --frames must be 1..1000, got %d", o.Frames)
	}
	if o.Top < 1 || o.Top > 10000 {
		return fmt.Errorf("mem: --top must be 1..10000, got %d", o.Top)
	}
	if o.Native && o.Engine == EngineTracemalloc {
		return fmt.Errorf("mem: --native needs the probe engine (tracemalloc sees Python frames only)")
	}
	if o.SampleBytes > maxSampleBytes {
		return fmt.Errorf("mem: --sample-bytes must be at most %d (1 GiB), got %d", maxSampleBytes, o.SampleBytes)
	}
	if o.MinGrowthShare < 0 || o.MinGrowthShare >= 1 {
		return fmt.Errorf("mem: the minimum growth share must be in [0, 1), got %v", o.MinGrowthShare)
	}
	return nil
}

// Frame of a site's stack.
type Frame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	// Kind: "" for a Python frame, KindNative (File: the ELF mapped) or
	// KindMarker (probe --native).
	Kind  string `json:"kind,omitempty"`
	Entry bool   `json:"-"` // entered from C: ends a run one eval-loop frame executes
}

// Site is one allocation stack: its innermost frame, its bytes and count
// (in growth: what it grew by over the window), its stack innermost first.
type Site struct {
	Function  string  `json:"function"`
	File      string  `json:"file"`
	Line      int     `json:"line"`
	Bytes     int64   `json:"bytes"`
	Count     int64   `json:"count"`
	BytesPerS float64 `json:"bytes_per_s,omitempty"` // growth only
	BytesEnd  *int64  `json:"bytes_end,omitempty"`   // growth only: what lives at the end
	CountEnd  *int64  `json:"count_end,omitempty"`
	Stack     []Frame `json:"stack"`
}

// Memory is the process's resident memory at both ends of the window.
type Memory struct {
	RSSStart  uint64 `json:"rss_start_bytes"`
	RSSEnd    uint64 `json:"rss_end_bytes"`
	PSSStart  uint64 `json:"pss_start_bytes"`
	PSSEnd    uint64 `json:"pss_end_bytes"`
	RSSDeltaS int64  `json:"rss_delta_bytes"`
	PSSDeltaS int64  `json:"pss_delta_bytes"`
	Error     string `json:"error,omitempty"`
}

// Other sums the growth below the list's threshold.
type Other struct {
	Bytes int64 `json:"bytes"`
	Sites int   `json:"sites"`
}

// Cost is what the window cost the target.
type Cost struct {
	StartPauseS float64 `json:"start_script_s"` // the first script's run (the target paused, GIL held)
	EndPauseS   float64 `json:"end_script_s"`
	Nudged      string  `json:"nudged,omitempty"`
}

// Result of one window.
type Result struct {
	Pid              int     `json:"pid"`
	Python           string  `json:"python"`
	Engine           string  `json:"engine"`
	EngineReason     string  `json:"engine_reason,omitempty"` // auto: why this engine
	WindowS          float64 `json:"window_s"`                // between the two snapshots, on the target's clock
	Frames           int     `json:"frames"`
	TracemallocWasOn bool    `json:"tracemalloc_was_on"`
	TracemallocOnNow bool    `json:"tracemalloc_on_after"`
	TracedBytesEnd   int64   `json:"traced_bytes_end"`
	TracedPeakBytes  int64   `json:"traced_peak_bytes"`
	GrowthTotalBytes int64   `json:"growth_total_bytes"`
	Sites            int     `json:"sites"`
	Growth           []Site  `json:"growth"`
	GrowthOther      Other   `json:"growth_other"`
	BySize           []Site  `json:"by_size"`
	ByCount          []Site  `json:"by_count"`
	Memory           Memory  `json:"memory"`
	Cost             Cost    `json:"cost"`
	Interrupted      bool    `json:"interrupted,omitempty"` // Ctrl-C ended the window early
	// Execed (-p PID, probe engine): the target exec'd this program and
	// the window ended at the exec (seen within 20 ms).
	Execed string `json:"target_execed,omitempty"`
	// Stopped (probe engine): the target was stopped by someone else at
	// the window's start or end (its allocations then: none).
	Stopped string `json:"stopped,omitempty"`
	// ProbesEnded (probe engine): the thread the probes were open on
	// ended and none other could take them, and the window ended there
	// (the kernel fires them no more).
	ProbesEnded string `json:"probes_ended,omitempty"`
	// ProbesMoved (probe engine): each time the thread the probes were
	// open on ended and they were opened again on a live one.
	ProbesMoved []ProbesMove `json:"probes_moved,omitempty"`
	// Curve: traced bytes (tracemalloc, in the target) and RSS/PSS (procfs)
	// over the window, on one time axis from the first snapshot.
	Curve []CurvePoint `json:"curve"`
	// Probe: the probe engine's account (engine probe only).
	Probe *ProbeStats `json:"probe,omitempty"`

	allGrowth []Site // every grown site (up to the script's cap), for the flame formats
}

// CurvePoint is one point of the growth curve: TracedBytes from the
// target's watchdog, or RSS/PSS from procfs (the other fields absent).
type CurvePoint struct {
	TS          float64 `json:"t_s"`
	TracedBytes *int64  `json:"traced_bytes,omitempty"`
	RSSBytes    *uint64 `json:"rss_bytes,omitempty"`
	PSSBytes    *uint64 `json:"pss_bytes,omitempty"`
}

type rssPoint struct {
	mono     float64
	rss, pss uint64
}

// curvePeriod: about 120 points over the window, at most 4 a second.
func curvePeriod(d time.Duration) time.Duration {
	return max(250*time.Millisecond, d/120)
}

func monotonic() float64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// curve merges both series by time, relative to t0 (the first snapshot).
func curve(t0 float64, traced [][2]float64, rss []rssPoint) []CurvePoint {
	out := make([]CurvePoint, 0, len(traced)+len(rss))
	for _, p := range traced {
		b := int64(p[1])
		out = append(out, CurvePoint{TS: p[0] - t0, TracedBytes: &b})
	}
	for _, p := range rss {
		r, q := p.rss, p.pss
		out = append(out, CurvePoint{TS: p.mono - t0, RSSBytes: &r, PSSBytes: &q})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TS < out[j].TS })
	return out
}

// maxSites bounds what the end script sends back for the flame formats.
const maxSites = 5000

// Run observes one window.
func Run(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if s.Py == nil {
		return nil, fmt.Errorf("pid %d: no Python interpreter open", s.Pid)
	}
	v := s.Py.Version()
	switch {
	case opt.Engine == EngineProbe:
		return probeRun(ctx, s, opt)
	case opt.Native:
		res, err := probeRun(ctx, s, opt)
		if err != nil {
			return nil, err
		}
		res.EngineReason = "auto: --native: allocator uprobes (tracemalloc sees Python frames only; each allocation seen costs a trap)"
		return res, nil
	case opt.Engine == "" || opt.Engine == EngineAuto:
		// 3.14+: tracemalloc first — it sees every allocation at a few
		// times the target's cost, where each probe is a trap (hundreds
		// of times slower on an allocation-bound loop, BENCHMARKS.md) and
		// a stripped build hides inlined allocations from them.
		if v.Minor >= 14 {
			res, err := tracemallocRun(ctx, s, opt)
			if err == nil {
				res.EngineReason = "auto: Python 3.14+: tracemalloc through PEP 768 (cheaper than the allocator probes, and it sees every allocation)"
				return res, nil
			}
			pres, perr := probeRun(ctx, s, opt)
			if perr != nil {
				return nil, fmt.Errorf("%w; and the allocator probes: %w", err, perr)
			}
			pres.EngineReason = "auto: tracemalloc refused (" + err.Error() + "): allocator uprobes (each allocation seen costs a trap)"
			return pres, nil
		}
		res, err := probeRun(ctx, s, opt)
		if err != nil {
			return nil, fmt.Errorf("pid %d runs Python %s: %w; and tracemalloc through PEP 768 needs 3.14+", s.Pid, v, err)
		}
		res.EngineReason = "auto: Python " + v.String() + " (before 3.14, no PEP 768): allocator uprobes (each allocation seen costs a trap)"
		return res, nil
	}
	return tracemallocRun(ctx, s, opt)
}

// needs314 says why in mem's words and is remoteexec.ErrUnsupported (an
// unsupported version: README's exit status 5).
type needs314 struct{ msg string }

func (e needs314) Error() string { return e.msg }
func (e needs314) Unwrap() error { return remoteexec.ErrUnsupported }

// tracemallocRun observes one window with tracemalloc in the target.
func tracemallocRun(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	v := s.Py.Version()
	if v.Minor < 14 {
		return nil, needs314{fmt.Sprintf("pid %d runs Python %s: tracemalloc through PEP 768 needs 3.14+ (--engine probe works on every version)", s.Pid, v)}
	}
	ch, err := remoteexec.Open(s)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	token := hex.EncodeToString(rnd[:])
	if err := ch.Mkfifo("alive"); err != nil {
		return nil, err
	}
	res := &Result{Pid: s.Pid, Python: v.String(), Engine: EngineTracemalloc}
	// Any thread will do for tracemalloc: the main one, or one that runs.
	ropt := remoteexec.Options{Tid: opt.Tid, Timeout: opt.Timeout, Nudge: opt.Nudge, AnyThread: opt.Tid == 0}
	grace := opt.Duration + 2*opt.Timeout + 30*time.Second

	ropt.Source, ropt.Name = []byte(startScript), "<pyobs mem start>"
	every := curvePeriod(opt.Duration)
	ropt.Globals = map[string]string{"TOKEN": token, "FIFO": ch.TargetPath("alive"),
		"FRAMES": strconv.Itoa(opt.Frames), "DEADLINE_S": strconv.FormatFloat(grace.Seconds(), 'f', 1, 64),
		"INTERVAL_S": strconv.FormatFloat(every.Seconds(), 'f', 3, 64)}
	sctx, scancel := context.WithTimeout(ctx, opt.Timeout+30*time.Second)
	r1, err := ch.Run(sctx, ropt)
	scancel()
	if err != nil {
		return nil, fmt.Errorf("can't start the window: %w", err)
	}
	if r1.Exception != "" {
		return nil, fmt.Errorf("pid %d: the start script raised %s: %s", s.Pid, r1.Exception, lastLine(r1.Traceback))
	}
	res.Cost.StartPauseS = r1.Ran.Seconds()
	res.Cost.Nudged = r1.Nudged
	var start struct {
		WasTracing bool `json:"was_tracing"`
		Frames     int  `json:"frames"`
	}
	if err := json.Unmarshal(r1.Output, &start); err != nil {
		return nil, fmt.Errorf("pid %d: the start script's report %q: %w", s.Pid, trunc(r1.Output), err)
	}
	res.TracemallocWasOn, res.Frames = start.WasTracing, start.Frames
	// The write end, opened now that the watchdog holds the read end (a
	// FIFO reader hangs up only on a writer it has seen come): pyobs's
	// death closes it, the watchdog sees POLLHUP and ends the window.
	alive, err := os.OpenFile(ch.HostPath("alive"), os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("can't open the watchdog's pipe %s: %w", ch.HostPath("alive"), err)
	}
	defer alive.Close()

	// RSS/PSS on the growth curve's period (CLOCK_MONOTONIC: the clock of
	// the target's time.monotonic, so both curves share a time axis).
	// The first reading once tracemalloc traces, not before the start
	// script waited for the target's eval loop: both bound the window.
	rssStart, smErr := smaps(s)
	var rss []rssPoint
	t := time.NewTimer(opt.Duration)
	tick := time.NewTicker(every)
wait:
	for {
		select {
		case <-tick.C:
			if sm, err := smaps(s); err == nil {
				rss = append(rss, rssPoint{mono: monotonic(), rss: sm.Rss, pss: sm.Pss})
			}
		case <-t.C:
			break wait
		case <-ctx.Done():
			t.Stop()
			res.Interrupted = true
			break wait
		}
	}
	tick.Stop()

	rssEnd, smErr2 := smaps(s)
	// The end script runs even after Ctrl-C: the window's result is written.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opt.Timeout+time.Minute)
	defer cancel()
	ropt.Source, ropt.Name = []byte(endScript), "<pyobs mem end>"
	ropt.Globals = map[string]string{"TOKEN": token, "TOP": strconv.Itoa(opt.Top), "MAX_SITES": strconv.Itoa(maxSites)}
	r2, err := ch.Run(ectx, ropt)
	if err != nil {
		return nil, fmt.Errorf("can't end the window (the target-side watchdog stops tracemalloc within %v): %w", grace, err)
	}
	if r2.Exception != "" {
		return nil, fmt.Errorf("pid %d: the end script raised %s: %s", s.Pid, r2.Exception, lastLine(r2.Traceback))
	}
	res.Cost.EndPauseS = r2.Ran.Seconds()
	var end struct {
		WindowS    float64      `json:"window_s"`
		T0         float64      `json:"t0"`
		Curve      [][2]float64 `json:"curve"`
		TracedEnd  int64        `json:"traced_bytes_end"`
		TracedPeak int64        `json:"traced_peak_bytes"`
		Total      int64        `json:"growth_total_bytes"`
		Sites      int          `json:"sites"`
		Growth     []Site       `json:"growth"`
		BySize     []Site       `json:"by_size"`
		ByCount    []Site       `json:"by_count"`
	}
	if err := json.Unmarshal(r2.Output, &end); err != nil {
		return nil, fmt.Errorf("pid %d: the end script's report %q: %w", s.Pid, trunc(r2.Output), err)
	}
	res.WindowS, res.TracedBytesEnd, res.TracedPeakBytes = end.WindowS, end.TracedEnd, end.TracedPeak
	res.GrowthTotalBytes, res.Sites, res.BySize, res.ByCount = end.Total, end.Sites, end.BySize, end.ByCount
	res.TracemallocOnNow = res.TracemallocWasOn
	res.allGrowth = end.Growth
	res.Growth, res.GrowthOther = selectGrowth(end.Growth, end.Total, opt.MinGrowthShare, opt.Top, end.WindowS)
	res.Memory = memory(rssStart, rssEnd, smErr, smErr2)
	res.Curve = curve(end.T0, end.Curve, rss)
	return res, nil
}

// selectGrowth keeps the sites that grew at least share of the total (and
// 1 KiB), at most top of them, most bytes first (as the script sent them).
func selectGrowth(all []Site, total int64, share float64, top int, window float64) ([]Site, Other) {
	min := max(int64(share*float64(total)), 1024)
	var out []Site
	var other Other
	for _, g := range all {
		if g.Bytes >= min && len(out) < top {
			if window > 0 {
				g.BytesPerS = float64(g.Bytes) / window
			}
			out = append(out, g)
			continue
		}
		other.Bytes += g.Bytes
		other.Sites++
	}
	if out == nil {
		out = []Site{}
	}
	return out, other
}

func smaps(s *session.Session) (procfs.SmapsRollup, error) {
	p := s.FS.SmapsRollupPath(s.Pid)
	f, err := os.Open(p)
	if err != nil {
		return procfs.SmapsRollup{}, fmt.Errorf("pid %d: can't open %s: %w", s.Pid, p, err)
	}
	defer f.Close()
	r, err := procfs.ParseSmapsRollup(f)
	if err != nil {
		return r, fmt.Errorf("pid %d: can't parse %s: %w", s.Pid, p, err)
	}
	return r, nil
}

func memory(a, b procfs.SmapsRollup, e1, e2 error) Memory {
	if err := errors.Join(e1, e2); err != nil {
		return Memory{Error: oneLine(err.Error())}
	}
	return Memory{RSSStart: a.Rss, RSSEnd: b.Rss, PSSStart: a.Pss, PSSEnd: b.Pss,
		RSSDeltaS: int64(b.Rss) - int64(a.Rss), PSSDeltaS: int64(b.Pss) - int64(a.Pss)}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func lastLine(tb string) string {
	tb = strings.TrimSpace(tb)
	if i := strings.LastIndexByte(tb, '\n'); i >= 0 {
		return tb[i+1:]
	}
	return tb
}

func trunc(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// execedAs is err's *session.ExecedError, nil when it is none.
func execedAs(err error) *session.ExecedError {
	var xe *session.ExecedError
	if errors.As(err, &xe) {
		return xe
	}
	return nil
}
