package top

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/session"
)

// Options of a live view.
type Options struct {
	Mode     string        // cpu (default), wall, gil: as record's
	Freq     int           // Hz (99 when 0)
	Interval time.Duration // one snapshot per interval (1 s when 0)
	Duration time.Duration // 0: until ctx ends or the target exits
	Engine   string        // cpu mode: auto, bpf, perf (record.Options.Engine)
	// OnFallback receives the one line saying why cpu mode did not use bpf.
	OnFallback func(string)
}

// Check says what is wrong with o, in one line (nil: nothing).
func (o *Options) Check() error {
	switch {
	case o.Freq <= 0 || o.Freq > 100000:
		return fmt.Errorf("-F %d is outside 1..100000", o.Freq)
	case o.Mode != "cpu" && o.Mode != "wall" && o.Mode != "gil":
		return fmt.Errorf("unknown --mode %q (cpu, wall, gil)", o.Mode)
	case o.Engine != "auto" && o.Engine != "bpf" && o.Engine != "perf":
		return fmt.Errorf("unknown --engine %q (auto, bpf, perf)", o.Engine)
	case o.Engine == "bpf" && o.Mode != "cpu":
		return fmt.Errorf("--engine bpf is cpu mode's; wall and gil read stacks from user space")
	case o.Duration < 0:
		return fmt.Errorf("--duration must not be negative")
	}
	return nil
}

// Function is one function's row: samples in the interval and since the start.
type Function struct {
	Function string  `json:"function"`       // qualname, or a marker such as "[late read]"
	File     string  `json:"file,omitempty"` // Python file ("" for markers)
	Own      int64   `json:"own"`            // samples with it innermost
	Total    int64   `json:"total"`          // samples with it anywhere on the stack
	OwnPct   float64 `json:"own_pct"`        // of the interval's samples
	TotalPct float64 `json:"total_pct"`
	OwnAll   int64   `json:"own_all"` // since the start
	TotalAll int64   `json:"total_all"`
}

// Thread is one thread's share of the interval, and its functions (their
// percentages of all the interval's samples, like the thread's).
type Thread struct {
	Thread    string     `json:"thread"` // "NAME (TID)" or "thread TID"
	Samples   int64      `json:"samples"`
	Pct       float64    `json:"pct"`
	Functions []Function `json:"functions"`
}

// Snapshot is one interval.
type Snapshot struct {
	Schema      int     `json:"schema"` // 1 (docs/json.md)
	Pid         int     `json:"pid"`
	Mode        string  `json:"mode"`
	Engine      string  `json:"engine,omitempty"`
	Fallback    string  `json:"fallback,omitempty"` // why cpu mode did not use bpf
	ElapsedS    float64 `json:"elapsed_s"`
	IntervalS   float64 `json:"interval_s"`
	Freq        int     `json:"requested_hz"`
	Samples     int64   `json:"samples"`       // in the interval
	SamplesPerS float64 `json:"samples_per_s"` // in the interval
	SamplesAll  uint64  `json:"samples_all"`   // since the start
	ObserverCPU float64 `json:"observer_cpu"`  // CPUs the observer used in the interval (1 = one CPU)
	TargetCPU   float64 `json:"target_cpu"`    // CPUs the target used in the interval
	Lost        uint64  `json:"lost"`          // since the start, as record's footer counts them
	Torn        uint64  `json:"torn"`
	Late        uint64  `json:"late"`
	// StoppedS: how long in the interval the target was seen stopped by
	// someone else (a signal, job control, a tracer: record's look at its
	// thread states every 100 ms); StoppedAll since the start. A stopped
	// target runs nothing and is not sampled.
	StoppedS   float64    `json:"stopped_s,omitempty"`
	StoppedAll float64    `json:"stopped_all_s,omitempty"`
	Threads    []Thread   `json:"threads"`   // by samples, descending
	Functions  []Function `json:"functions"` // by own, then total, descending; only those seen in the interval
	Final      bool       `json:"final,omitempty"`
}

// funcKey is a function, over all threads (thread "") or in one.
type funcKey struct{ name, file, thread string }

type acc struct{ own, total, ownAll, totalAll int64 }

// differ turns a growing profile into per-interval snapshots.
type differ struct {
	opt   Options
	pid   int
	prev  map[*flame.Stack]int64
	funcs map[funcKey]*acc
	seen  []int // scratch: frame ids of one stack's functions, for once-per-sample totals
	keys  map[int]funcKey
	// The recording's elapsed time and the target's CPU since its start
	// at the last snapshot (both from one Progress: the first interval's
	// CPU is counted from the recording's start, as its length is, not
	// from before the sampler's load).
	lastEl      time.Duration
	lastCPU     float64
	lastStopped float64
	// The observer's CPU and when it was read: from the sampler's first
	// tick, so the walker's load (before it) is not the first second's.
	obsAt  time.Time
	obsCPU time.Duration
}

func newDiffer(pid int, opt Options) *differ {
	return &differ{opt: opt, pid: pid, prev: map[*flame.Stack]int64{}, funcs: map[funcKey]*acc{},
		keys: map[int]funcKey{}}
}

// key is the function a frame counts under; ok false for a thread root.
func (d *differ) key(p *flame.Profile, id int) (funcKey, bool) {
	if k, ok := d.keys[id]; ok {
		return k, k.name != ""
	}
	f := p.Frame(id)
	var k funcKey
	switch f.Kind {
	case flame.Thread:
	case flame.Python:
		k = funcKey{name: f.Function, file: f.File}
	default:
		k = funcKey{name: f.Label()}
	}
	d.keys[id] = k
	return k, k.name != ""
}

// snapshot folds what p gained since the last call.
func (d *differ) snapshot(p *flame.Profile, pr record.Progress) *Snapshot {
	sn := &Snapshot{Schema: 1, Pid: d.pid, Mode: p.Meta.Mode, Engine: p.Meta.Engine, Fallback: p.Meta.Fallback, ElapsedS: pr.Elapsed.Seconds(), Freq: d.opt.Freq,
		SamplesAll: pr.Samples, Lost: pr.Lost, Torn: pr.Torn, Late: pr.Late}
	iv := pr.Elapsed - d.lastEl
	sn.IntervalS = iv.Seconds()
	for _, a := range d.funcs {
		a.own, a.total = 0, 0
	}
	threads := map[string]int64{}
	p.EachStack(func(s *flame.Stack) {
		w := s.Weight - d.prev[s]
		if w <= 0 {
			return
		}
		d.prev[s] = s.Weight
		sn.Samples += w
		fr := s.Frames
		thread := ""
		if len(fr) > 0 && p.Frame(fr[0]).Kind == flame.Thread {
			thread = p.Frame(fr[0]).Function
			threads[thread] += w
		}
		// The own frame is the innermost one, but not wall mode's thread
		// state after a Python frame ("[sleeping]"): the function is where
		// the thread is.
		inner := len(fr) - 1
		if inner > 0 && p.Frame(fr[inner]).Kind == flame.State && p.Frame(fr[inner-1]).Kind == flame.Python {
			inner--
		}
		d.seen = d.seen[:0]
		for i := 0; i <= inner; i++ {
			k, ok := d.key(p, fr[i])
			if !ok {
				continue
			}
			dup := false // recursion: total counts a function once per sample
			for _, j := range d.seen {
				if d.keys[j] == k {
					dup = true
					break
				}
			}
			if !dup {
				d.seen = append(d.seen, fr[i])
			}
			tk := k
			tk.thread = thread
			for _, k := range []funcKey{k, tk} {
				a := d.funcs[k]
				if a == nil {
					a = &acc{}
					d.funcs[k] = a
				}
				if i == inner {
					a.own += w
					a.ownAll += w
				}
				if !dup {
					a.total += w
					a.totalAll += w
				}
				if thread == "" {
					break
				}
			}
		}
	})
	pct := func(n int64) float64 {
		if sn.Samples == 0 {
			return 0
		}
		return 100 * float64(n) / float64(sn.Samples)
	}
	byThread := map[string][]Function{}
	sn.Functions, sn.Threads = []Function{}, []Thread{}
	for k, a := range d.funcs {
		if a.total == 0 {
			continue
		}
		f := Function{Function: k.name, File: k.file, Own: a.own, Total: a.total,
			OwnPct: pct(a.own), TotalPct: pct(a.total), OwnAll: a.ownAll, TotalAll: a.totalAll}
		if k.thread != "" {
			byThread[k.thread] = append(byThread[k.thread], f)
		} else {
			sn.Functions = append(sn.Functions, f)
		}
	}
	SortFunctions(sn.Functions, ByOwn)
	for name, n := range threads {
		fs := byThread[name]
		SortFunctions(fs, ByOwn)
		sn.Threads = append(sn.Threads, Thread{Thread: name, Samples: n, Pct: pct(n), Functions: fs})
	}
	sortThreads(sn.Threads)
	if s := iv.Seconds(); s >= 0.1 { // a count over a sliver (a last one) misleads
		sn.SamplesPerS = float64(sn.Samples) / s
	}
	// The target's CPU over the interval's own length, even a short last
	// one's: its samples came from that CPU.
	if s := iv.Seconds(); s > 0 && pr.TargetCPU >= d.lastCPU {
		sn.TargetCPU = (pr.TargetCPU - d.lastCPU) / s
	}
	d.lastEl, d.lastCPU = pr.Elapsed, max(d.lastCPU, pr.TargetCPU)
	// The watch counts whole looks (100 ms), not this interval's edges:
	// what exceeds the interval is said in the next one, so the intervals
	// add up to the whole.
	if pr.StoppedS > d.lastStopped {
		sn.StoppedS = min(pr.StoppedS-d.lastStopped, iv.Seconds())
		d.lastStopped += sn.StoppedS
	}
	sn.StoppedAll = max(pr.StoppedS, d.lastStopped)
	if now, c := time.Now(), clock.ObserverCPU(); !d.obsAt.IsZero() {
		if w := now.Sub(d.obsAt).Seconds(); w >= 0.1 {
			sn.ObserverCPU = (c - d.obsCPU).Seconds() / w
			d.obsAt, d.obsCPU = now, c
		}
	}
	return sn
}

// Run samples s until ctx ends or the target exits, calling emit with one
// snapshot per interval (on the sampler's goroutine: emit should return
// quickly) and a last one, marked Final, with what the end added.
func Run(ctx context.Context, s *session.Session, opt Options, emit func(*Snapshot)) error {
	if emit == nil {
		return errors.New("top: no snapshot callback")
	}
	if opt.Freq == 0 {
		opt.Freq = 99
	}
	if opt.Interval <= 0 {
		opt.Interval = time.Second
	}
	d := newDiffer(s.Pid, opt)
	var last record.Progress
	ropt := record.Options{Mode: opt.Mode, Freq: opt.Freq, Duration: opt.Duration, Threads: true, Engine: opt.Engine, OnFallback: opt.OnFallback,
		End: func(pr record.Progress) { last = pr }, // the whole length, the target's CPU to its end
		Stream: func(p *flame.Profile, pr record.Progress) {
			if d.obsAt.IsZero() {
				d.obsAt, d.obsCPU = time.Now(), clock.ObserverCPU()
			}
			// The first snapshot comes after half an interval (something
			// to look at soon), then one per interval.
			if iv := pr.Elapsed - d.lastEl; iv >= opt.Interval-opt.Interval/10 || d.lastEl == 0 && iv >= opt.Interval/2 {
				emit(d.snapshot(p, pr))
			}
		}}
	if ropt.Engine == "" {
		ropt.Engine = "auto"
	}
	prof, err := record.Run(ctx, s, ropt)
	if prof != nil && err == nil {
		sn := d.snapshot(prof, last)
		sn.Final = true
		emit(sn)
	}
	return err
}
