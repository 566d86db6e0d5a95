package diagnose

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/stat"
	"github.com/pyobs/pyobs/internal/trace"
)

// Options of a diagnosis.
type Options struct {
	// Duration is the whole run's budget (default 60 s), split among the
	// phases that run.
	Duration time.Duration
	// Freq is the on-CPU phase's sampling rate (default 99 Hz).
	Freq int
	// Progress, when set, gets one line as each phase starts (and the
	// decision), for stderr.
	Progress func(line string)
}

// Budget rules: the counting window is a tenth of the budget (1..5 s),
// the dump at the end is kept this much, and no phase runs shorter than
// minPhase.
const (
	minCount   = time.Second
	maxCount   = 5 * time.Second
	dumpSlack  = 500 * time.Millisecond
	minPhase   = time.Second
	defaultDur = 60 * time.Second
)

// IdleWaits are the offcpu --exclude patterns of waits that are idle by
// construction: an event loop's selector, a thread waiting on a
// Condition (Event.wait, Queue.get, Barrier) or joining another. Each
// matches a frame that is innermost when present (it calls C code that
// blocks). Their time is reported as idle, not as a finding.
// Compiled at the first diagnosis, not at every command's start.
var IdleWaits = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`^(\w+Selector\.)?select \(.*selectors\.py:\d+\)$`),
		regexp.MustCompile(`^(Condition\.)?wait \(.*threading\.py:\d+\)$`),
		regexp.MustCompile(`^(Thread\.)?(join|_wait_for_tstate_lock) \(.*threading\.py:\d+\)$`),
	}
})

// run is one diagnosis in progress.
type run struct {
	s     *session.Session
	opt   Options
	rep   *Report
	start time.Time
	end   time.Time // the budget's end
}

// Run diagnoses the target: counting, the decision, then sampling
// and/or off-CPU recording, a narrow trace when a wait names a syscall,
// and a Python dump, within opt.Duration. When ctx ends (Ctrl-C) the
// phases done are reported (Complete false) and no error is returned; an
// error is returned only when not even the counting phase ran.
func Run(ctx context.Context, s *session.Session, opt Options) (*Report, error) {
	if opt.Duration <= 0 {
		opt.Duration = defaultDur
	}
	if opt.Freq <= 0 {
		opt.Freq = 99
	}
	r := &run{s: s, opt: opt, start: time.Now()}
	r.end = r.start.Add(opt.Duration)
	r.rep = &Report{Schema: Schema, Pid: s.Pid, Complete: true, BudgetS: opt.Duration.Seconds(),
		Plan: []PlanItem{}, Findings: []Finding{}, RuledOut: []RuledOut{}, Phases: []Phase{}, Skipped: []Skipped{},
		Hottest: []Hot{}, Waits: []Wait{}, Syscalls: []Syscall{}, Threads: []PyThread{}, Tasks: []Task{}, Notes: []string{},
		CannotSee: cannotSee}
	if s.Py != nil {
		r.rep.Python = s.Py.Version().String()
	}
	err := r.procedure(ctx)
	rep := r.rep
	rep.ElapsedS = round(time.Since(r.start).Seconds(), 3)
	for _, p := range rep.Phases {
		rep.Total.DurationS += p.DurationS
		rep.Total.ObserverCPUS += p.ObserverCPUS
		rep.Total.TargetStoppedS += p.TargetStoppedS
	}
	rep.Total.DurationS = round(rep.Total.DurationS, 6)
	rep.Total.ObserverCPUS = round(rep.Total.ObserverCPUS, 6)
	rep.Total.TargetStoppedS = round(rep.Total.TargetStoppedS, 6)
	sortFindings(rep.Findings)
	if err != nil && len(rep.Phases) == 0 {
		return nil, err
	}
	if err != nil {
		rep.Complete = false
		if rep.Interrupt == "" {
			rep.Interrupt = err.Error()
		}
	}
	return rep, nil
}

var cannotSee = []string{
	"what happened outside the window (each phase sees only its own slice of the budget)",
	"on-CPU stacks while the off-CPU phase runs, and waits while the sampling phase runs (the phases take turns)",
	"native and kernel frames of hot C code (run pyobs record --native --kernel for those)",
	"syscalls outside phase 4's narrow list, and calls already blocked when the trace attached (they are in the waits)",
	"anything a later phase would have shown when the procedure stopped early (throttled, queued, interrupted)",
}

func (r *run) progress(format string, a ...any) {
	if r.opt.Progress != nil {
		r.opt.Progress(fmt.Sprintf(format, a...))
	}
}

// left is the budget that remains for the phases still to run.
func (r *run) left() time.Duration { return time.Until(r.end) - dumpSlack }

// stopped says why the procedure must stop now ("" to go on).
func (r *run) stopped(ctx context.Context) string {
	if ctx.Err() != nil {
		var i session.Interrupt
		if errors.As(context.Cause(ctx), &i) {
			return i.Error() + ": the report holds the phases done"
		}
		return "interrupted: the report holds the phases done"
	}
	if r.s.Spawned() {
		select {
		case <-r.s.Exited():
			return fmt.Sprintf("the target exited (status %d): the report holds the phases done", r.s.ExitCode())
		default:
		}
	} else if !r.s.Alive() {
		return fmt.Sprintf("pid %d exited: the report holds the phases done", r.s.Pid)
	}
	return ""
}

// phase times f and charges it the observer CPU pyobs used meanwhile.
func (r *run) phase(name, price string, budget time.Duration, f func(p *Phase) error) error {
	p := Phase{Name: name, Price: price, BudgetS: round(budget.Seconds(), 3)}
	t0, c0 := time.Now(), clock.ObserverCPU()
	err := f(&p)
	p.DurationS = round(time.Since(t0).Seconds(), 6)
	p.ObserverCPUS = round((clock.ObserverCPU() - c0).Seconds(), 6)
	if err != nil {
		p.Error = err.Error()
	}
	r.rep.Phases = append(r.rep.Phases, p)
	return err
}

func (r *run) skip(phase, why string) {
	r.rep.Skipped = append(r.rep.Skipped, Skipped{Phase: phase, Why: why})
}

func (r *run) procedure(ctx context.Context) error {
	rep := r.rep
	// Phase 1: counting.
	win := min(max(r.opt.Duration/10, minCount), maxCount)
	rep.Plan = append(rep.Plan, PlanItem{PhaseCount, round(win.Seconds(), 3)})
	r.progress("phase 1 count: %s of counters (/proc, cgroup cpu.stat, PSI, perf counters)", fmtDur(win))
	var st *stat.Result
	err := r.phase(PhaseCount, "counting", win, func(p *Phase) error {
		p.Mechanism = "stat: /proc stat/status/schedstat, cgroup cpu.stat, PSI, perf counters"
		var err error
		st, err = r.count(ctx, win)
		return err
	})
	if err != nil {
		return err
	}
	if why := r.stopped(ctx); why != "" {
		rep.Interrupt = why
		rep.Stat = st.Stat
		d := decide(st.Stat, r.s.Pid)
		r.apply(d)
		return errors.New(why)
	}
	rep.Stat = st.Stat
	d := decide(st.Stat, r.s.Pid)
	r.apply(d)
	r.progress("decision: %s — %s", d.verdict, d.sentence)
	if d.stop {
		r.skip(PhaseCPU, d.stopWhy)
		r.skip(PhaseOffCPU, d.stopWhy)
		r.skip(PhaseTrace, d.stopWhy)
		return r.python(ctx)
	}
	// The rest of the budget, split among the phases that may run.
	left := r.left()
	var cpuB, offB, traceB time.Duration
	switch {
	case d.cpu && d.off:
		cpuB, offB, traceB = left*2/5, left*2/5, left/5
	case d.cpu:
		cpuB = left
	default:
		offB, traceB = left*7/10, left*3/10
	}
	for _, pi := range []PlanItem{{PhaseOffCPU, offB.Seconds()}, {PhaseTrace, traceB.Seconds()}, {PhaseCPU, cpuB.Seconds()}} {
		if pi.BudgetS > 0 {
			pi.BudgetS = round(pi.BudgetS, 3)
			rep.Plan = append(rep.Plan, pi)
		}
	}
	rep.Plan = append(rep.Plan, PlanItem{PhasePython, round(dumpSlack.Seconds(), 3)})
	// Off CPU first: whether a trace runs is known only after it, and in
	// a mixed run the sampling phase then takes what the trace left.
	var hyp *hypothesis
	if d.off {
		var err error
		if hyp, err = r.offCPU(ctx, offB); err != nil {
			return err
		}
	} else {
		r.skip(PhaseOffCPU, d.noOff)
	}
	unused := fmt.Sprintf("its %s of the budget were not used", fmtDur(traceB))
	if d.cpu {
		unused = fmt.Sprintf("its %s of the budget went to the on-CPU phase", fmtDur(traceB))
	}
	if hyp != nil {
		if err := r.trace(ctx, min(traceB, r.left()-cpuB), hyp); err != nil {
			return err
		}
	} else if d.off {
		r.skip(PhaseTrace, "no wait named a syscall or an I/O class worth tracing (locks, sleeps and idle waits are not traced); "+unused)
	} else {
		r.skip(PhaseTrace, "no off-CPU phase ran: no hypothesis to trace")
	}
	if d.cpu {
		if err := r.onCPU(ctx, r.left()); err != nil {
			return err
		}
	} else {
		r.skip(PhaseCPU, d.noCPU)
	}
	return r.python(ctx)
}

// count runs the stat engine over one window: Run on an attached target;
// a spawned one is measured with Stream for one interval (Run would
// measure it to its exit).
func (r *run) count(ctx context.Context, win time.Duration) (*stat.Result, error) {
	opt := stat.Options{Duration: win, Poll: 100 * time.Millisecond, Started: time.Now()}
	if !r.s.Spawned() {
		return stat.Run(ctx, r.s, opt)
	}
	opt.Interval = win
	var res *stat.Result
	err := stat.Stream(ctx, r.s, opt, func(x *stat.Result) error {
		if res == nil {
			res = x
		}
		return nil
	})
	if res == nil && err == nil {
		err = fmt.Errorf("can't count pid %d: no window measured", r.s.Pid)
	}
	return res, err
}

// onCPU is phase 2: a cpu-mode recording.
func (r *run) onCPU(ctx context.Context, budget time.Duration) error {
	if why := r.stopped(ctx); why != "" {
		r.rep.Interrupt = why
		r.skip(PhaseCPU, why)
		return errors.New(why)
	}
	if budget < minPhase {
		r.skip(PhaseCPU, fmt.Sprintf("budget left %s is below %s: raise -d", fmtDur(budget), fmtDur(minPhase)))
		return nil
	}
	r.progress("phase 2 on-cpu: sampling for %s (record --mode cpu, %d Hz)", fmtDur(budget), r.opt.Freq)
	return r.phase(PhaseCPU, "sampling", budget, func(p *Phase) error {
		p.Mechanism = fmt.Sprintf("record --mode cpu: perf task-clock samples at %d Hz, Python stack per sample", r.opt.Freq)
		pctx, cancel := within(ctx, budget)
		defer cancel()
		prof, err := record.Run(pctx, r.s, record.Options{Mode: "cpu", Freq: r.opt.Freq, Duration: budget})
		if prof != nil {
			r.rep.CPUProfile = prof
			p.TargetStoppedS = prof.Meta.TargetStoppedS
			r.rep.Hottest = hottest(prof, 10)
			r.cpuFindings(prof, budget)
		}
		return err
	})
}

// offCPU is phase 3: an offcpu recording with wait classes and wakers,
// idle waits excluded. It returns the hypothesis for phase 4, if any.
func (r *run) offCPU(ctx context.Context, budget time.Duration) (*hypothesis, error) {
	if why := r.stopped(ctx); why != "" {
		r.rep.Interrupt = why
		r.skip(PhaseOffCPU, why)
		return nil, errors.New(why)
	}
	if budget < minPhase {
		r.skip(PhaseOffCPU, fmt.Sprintf("budget left %s is below %s: raise -d", fmtDur(budget), fmtDur(minPhase)))
		return nil, nil
	}
	r.progress("phase 3 off-cpu: waits for %s (offcpu --waker, idle waits excluded)", fmtDur(budget))
	var hyp *hypothesis
	err := r.phase(PhaseOffCPU, "tracing context switches", budget, func(p *Phase) error {
		opt := offcpu.Options{Duration: budget, Threads: true, Waker: true, Exclude: IdleWaits()}
		t0 := time.Now()
		pctx, cancel := within(ctx, budget)
		defer cancel()
		res, err := offcpu.Run(pctx, r.s, opt)
		if res == nil && err != nil && ctx.Err() == nil {
			// --waker needs eBPF and has no fallback: without it, the
			// waits still count (auto: eBPF, else perf), waker unnamed.
			r.rep.Notes = append(r.rep.Notes, "off-CPU phase without wakers: "+oneLine(err.Error()))
			opt.Waker, opt.Engine = false, offcpu.EngineAuto
			opt.Duration = budget - time.Since(t0)
			res, err = offcpu.Run(pctx, r.s, opt)
		}
		if res == nil {
			return err
		}
		p.Mechanism = "offcpu: " + offcpuMechanism(res, opt.Waker)
		if res.Fallback != "" {
			r.rep.Notes = append(r.rep.Notes, res.Fallback)
		}
		r.rep.OffProfile = res.Profile
		r.rep.Waits = waits(res.Profile, 10)
		hyp = r.offFindings(res)
		return err
	})
	return hyp, err
}

// within is ctx ending when a phase's budget is spent: an engine's load
// (its verifier: up to ~1 s) comes out of its window, not out of the
// phases after it.
func within(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, time.Now().Add(budget))
}

func offcpuMechanism(res *offcpu.Result, waker bool) string {
	s := "context-switch records per thread (perf), wait classes from /proc"
	if res.Engine == "bpf" || strings.HasPrefix(res.Engine, "bpf") {
		s = "eBPF on sched_switch (kernel stacks, wait classes in the kernel)"
		if waker {
			s += " and sched_waking (wakers)"
		}
	}
	return s + ", Python stack per wait over ~1 ms"
}

// trace is phase 4: a narrow trace of the syscalls the waits name.
func (r *run) trace(ctx context.Context, budget time.Duration, hyp *hypothesis) error {
	if why := r.stopped(ctx); why != "" {
		r.rep.Interrupt = why
		r.skip(PhaseTrace, why)
		return errors.New(why)
	}
	if budget < minPhase {
		r.skip(PhaseTrace, fmt.Sprintf("budget left %s is below %s: raise -d", fmtDur(budget), fmtDur(minPhase)))
		return nil
	}
	r.rep.Hypothesis = hyp.text
	r.progress("phase 4 trace: %s for %s — hypothesis: %s", hyp.syscalls, fmtDur(budget), hyp.text)
	return r.phase(PhaseTrace, "tracing", budget, func(p *Phase) error {
		// eBPF only: a ptrace fallback would stop the target twice per
		// call, and a spawned target is not the tracer's child.
		opt := trace.Options{Engine: "tracepoint", Duration: budget, Syscalls: hyp.syscalls, Slow: time.Millisecond, Sites: 3}
		pctx, cancel := within(ctx, budget)
		defer cancel()
		res, err := trace.Run(pctx, r.s, opt)
		if res == nil {
			p.Mechanism = "trace -e " + hyp.syscalls + ": not run"
			r.skip(PhaseTrace, "the eBPF trace engine is unavailable ("+oneLine(fmt.Sprint(err))+"); ptrace is not used here: it stops the target twice per call")
			return nil
		}
		p.Mechanism = fmt.Sprintf("trace -e %s: %s engine (%s)", hyp.syscalls, res.Account.Engine, res.Account.Slowdown)
		p.TargetStoppedS = res.Account.Stopped.Seconds()
		r.traceFindings(res, hyp, budget)
		return err
	})
}

// python is phase 5: every thread's stack, and the asyncio tasks when
// asyncio is in use.
func (r *run) python(ctx context.Context) error {
	if why := r.stopped(ctx); why != "" {
		r.rep.Interrupt = why
		r.skip(PhasePython, why)
		return errors.New(why)
	}
	if r.s.Py == nil {
		r.skip(PhasePython, "no Python interpreter found in the target")
		return nil
	}
	r.progress("phase 5 python: thread stacks (dump, no stop)")
	return r.phase(PhasePython, "introspection", dumpSlack, func(p *Phase) error {
		p.Mechanism = "dump: thread stacks read from memory (process_vm_readv), asyncio tasks when present"
		td, err := dump.RunTasks(context.Background(), r.s, dump.Options{}) // the last phase runs even after Ctrl-C: a short read
		var d *dump.Dump
		if err == nil {
			d = td.Stacks
			p.TargetStoppedS = td.Read.StoppedUS / 1e6
			for _, t := range td.Tasks {
				tk := Task{Name: t.Name, Awaiting: t.Awaiting}
				if n := len(t.Coroutines); n > 0 {
					c := t.Coroutines[n-1]
					tk.Coroutine = fmt.Sprintf("%s (%s:%d)", c.Function, c.File, c.Line)
				}
				if len(r.rep.Tasks) < 50 {
					r.rep.Tasks = append(r.rep.Tasks, tk)
				}
			}
			if len(td.Tasks) > 0 {
				r.rep.Findings = append(r.rep.Findings, Finding{Phase: PhasePython, Kind: "asyncio",
					Summary:  fmt.Sprintf("asyncio in use: %d tasks", len(td.Tasks)),
					Evidence: map[string]any{"tasks": len(td.Tasks)}, Command: fmt.Sprintf("pyobs dump -p %d --tasks", r.s.Pid)})
			}
		} else if d, err = dump.Run(context.Background(), r.s, dump.Options{}); err != nil {
			return err
		}
		if d != nil {
			p.TargetStoppedS += d.Read.StoppedUS / 1e6
			for _, th := range d.Threads {
				pt := PyThread{Tid: th.Tid, Name: th.Name, State: th.State, HoldsGIL: th.HoldsGIL, Frames: []string{}}
				for i, f := range th.Frames {
					if i == 8 {
						break
					}
					pt.Frames = append(pt.Frames, fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line))
				}
				r.rep.Threads = append(r.rep.Threads, pt)
			}
		}
		return nil
	})
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
