package diagnose

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/trace"
)

// Thresholds of the decision (on top of internal/report's, which decide
// on-cpu against off-cpu and the run-queue saturation).
const (
	// ThrottledShare: throttled time per wall second at or above which the
	// cgroup's quota is the verdict (and the procedure stops).
	ThrottledShare = 0.05
	// MixedSwitchesPerSec: a thread using under half a core that gives up
	// the CPU this often is blocking; with the process on CPU, "mixed".
	MixedSwitchesPerSec = 20.0
	// QueuedShare: the run-queue share (wait / (wait + on CPU)) at or
	// above which a CPU-hungry process's verdict is "runqueue": it waited
	// for a CPU at least as long as it ran. Below it (and above
	// report.RunqueueShare) the queueing is a finding beside the verdict.
	QueuedShare = 0.5
	// IdleShare: after the off-CPU phase, non-idle waits below this share
	// of the window make the verdict "idle".
	IdleShare = 0.1
	// FindingShare: hot spots and waits below this share are listed in
	// the tables, not as findings.
	FindingShare = 0.1
	// StoppedShare: stopped by someone else this share of the counting
	// window or more, the verdict is "stopped" (stat judges the rest).
	StoppedShare = 0.5
)

// decision is what counting decided.
type decision struct {
	verdict, sentence string
	evidence          map[string]any
	cpu, off          bool   // phases 2 and 3 to run
	stop              bool   // the procedure ends after counting (throttled, queued)
	stopWhy           string // why the later phases are not run
	noCPU, noOff      string // why phase 2 / 3 is not run
	ruledOut          []RuledOut
	extra             []Finding // findings beside the verdict
	blockers          []string  // threads that block while the process is on CPU
}

func decide(st *report.Stat, pid int) decision {
	wall := max(st.WindowS, 1e-3)
	u := st.CPU.Utilization
	cg := st.Cgroup
	throttled := cg.ThrottledS / wall
	cpuWait := max(st.Sched.RunqueueWaitS, cg.ThrottledS) / wall
	demand := u + cpuWait
	d := decision{evidence: map[string]any{"utilization": round(u, 3), "cpu_wait_per_s": round(cpuWait, 3), "window_s": round(wall, 3)}}
	// Stopped by someone else (job control, a tracer) most of the window:
	// it ran nothing, so it neither used the CPU nor waited on anything.
	if s := st.Stopped; s != nil && s.Share >= StoppedShare {
		d.verdict = VerdictStopped
		d.sentence = fmt.Sprintf("Stopped: %d of its %d threads were stopped (state %s) for about %.1f s of the %.2f s window (%.0f %%): a stopped process runs nothing; resume it (SIGCONT, or detach its tracer) and diagnose again.",
			s.Threads, s.Of, s.State, s.Seconds, wall, 100*s.Share)
		d.evidence = map[string]any{"stopped_s": s.Seconds, "stopped_share": s.Share, "threads": s.Threads, "of": s.Of, "state": s.State}
		d.stop = true
		d.stopWhy = "the target was stopped for most of the window: there is nothing of it to sample, wait on or trace"
		return d
	}
	// Throttling.
	quota := "no quota"
	if cg.QuotaCores != nil {
		quota = fmt.Sprintf("quota %.2f cores", *cg.QuotaCores)
	}
	switch {
	case cg.NrThrottled > 0 && throttled >= ThrottledShare:
		d.verdict = VerdictThrottled
		d.sentence = fmt.Sprintf("CPU-throttled by its cgroup %s (v%d, %s): throttled in %d of %d periods, %.3f s of %.2f s (%.0f ms per second); the code is not slow, it is held back.",
			cg.Path, cg.Version, quota, cg.NrThrottled, cg.NrPeriods, cg.ThrottledS, wall, 1000*throttled)
		d.evidence = map[string]any{"nr_throttled": cg.NrThrottled, "nr_periods": cg.NrPeriods, "throttled_s": round(cg.ThrottledS, 4),
			"throttled_ms_per_s": round(1000*throttled, 1), "utilization": round(u, 3), "cgroup": cg.Path}
		if cg.QuotaCores != nil {
			d.evidence["quota_cores"] = *cg.QuotaCores
		}
		d.stop = true
		d.stopWhy = "the cgroup's CPU quota holds the process back: sampling would profile the throttling (the procedure stops at the cgroup finding)"
		return d
	case cg.Version == 0:
		d.ruledOut = append(d.ruledOut, RuledOut{"cpu-throttling", "no cgroup CPU controller found for the process: no quota to hit"})
	case cg.NrThrottled == 0:
		d.ruledOut = append(d.ruledOut, RuledOut{"cpu-throttling", fmt.Sprintf("nr_throttled flat at 0 across the %.2f s window (%d periods, %s, cgroup %s)", wall, cg.NrPeriods, quota, cg.Path)})
	default:
		d.ruledOut = append(d.ruledOut, RuledOut{"cpu-throttling", fmt.Sprintf("nr_throttled %d of %d periods but only %.1f ms throttled per second (threshold %.0f ms/s)", cg.NrThrottled, cg.NrPeriods, 1000*throttled, 1000*ThrottledShare)})
	}
	// Run queue.
	psi := ""
	if p := st.Pressure.CPU; p != nil {
		psi = fmt.Sprintf("; CPU pressure (%s) some %.1f %%", st.Pressure.Source, p.SomePct)
	}
	saturated := hasVerdict(st, "runqueue-saturated")
	switch {
	case saturated && st.Sched.RunqueueShare >= QueuedShare && demand >= report.OnCPUCores:
		d.verdict = VerdictRunqueue
		d.sentence = fmt.Sprintf("Queued: runnable threads waited %.3f s for a CPU over %.2f s (%.0f %% of the time they wanted one)%s: the machine lacks capacity, the code is not slow.",
			st.Sched.RunqueueWaitS, wall, 100*st.Sched.RunqueueShare, psi)
		d.evidence = map[string]any{"runqueue_wait_s": round(st.Sched.RunqueueWaitS, 4), "runqueue_wait_share": round(st.Sched.RunqueueShare, 4),
			"on_cpu_s": round(st.Sched.OnCPUS, 4), "utilization": round(u, 3), "nonvoluntary_ctxt_switches": st.Sched.Nonvoluntary}
		d.stop = true
		d.stopWhy = "the threads wait for a CPU (capacity): sampling would not say why (the procedure stops at the run-queue finding)"
		return d
	case saturated:
		// Queued, but less than it ran (or it wants little CPU): a finding
		// beside the verdict, not the verdict.
		d.extra = append(d.extra, Finding{Phase: PhaseCount, Kind: "runqueue",
			Summary: fmt.Sprintf("Also queued: runnable threads waited %.3f s for a CPU over %.2f s (%.0f %% of the time they wanted one)%s.",
				st.Sched.RunqueueWaitS, wall, 100*st.Sched.RunqueueShare, psi),
			Evidence: map[string]any{"runqueue_wait_s": round(st.Sched.RunqueueWaitS, 4), "runqueue_wait_share": round(st.Sched.RunqueueShare, 4), "on_cpu_s": round(st.Sched.OnCPUS, 4)},
			Command:  fmt.Sprintf("pyobs stat -p %d", pid), Weight: 0.5})
	case !st.Sched.SchedstatAvail:
		d.ruledOut = append(d.ruledOut, RuledOut{"run-queue", "not measured: the kernel keeps no per-task schedstat here (CONFIG_SCHED_INFO)" + psi})
	default:
		d.ruledOut = append(d.ruledOut, RuledOut{"run-queue", fmt.Sprintf("waited %.3f s for a CPU over %.2f s, %.1f %% of the time it wanted one (threshold %.0f %% and %.2f s/s)%s",
			st.Sched.RunqueueWaitS, wall, 100*st.Sched.RunqueueShare, 100*report.RunqueueShare, report.RunqueueMinS, psi)})
	}
	// On CPU, off CPU or both.
	for _, t := range st.Threads {
		if t.Utilization < 0.5 && float64(t.Voluntary)/wall >= MixedSwitchesPerSec {
			d.blockers = append(d.blockers, fmt.Sprintf("%s (%d): %.0f voluntary switches/s at %.2f cores", threadName(t), t.Tid, float64(t.Voluntary)/wall, t.Utilization))
		}
	}
	on := demand >= report.OnCPUCores
	switch {
	case on && len(d.blockers) > 0:
		d.verdict, d.cpu, d.off = VerdictMixed, true, true
		d.sentence = fmt.Sprintf("Both: %.2f cores used over %.2f s, and %d thread(s) keep blocking (%s): sample the CPU, then find the waits.",
			u, wall, len(d.blockers), strings.Join(d.blockers, "; "))
		d.evidence["blocking_threads"] = len(d.blockers)
	case on:
		d.verdict, d.cpu = VerdictOnCPU, true
		d.sentence = fmt.Sprintf("On CPU: %.2f cores used over %.2f s (user %.2f s, system %.2f s), no thread blocking often: sample where the time goes.",
			u, wall, st.CPU.UserS, st.CPU.SystemS)
		d.noOff = fmt.Sprintf("on CPU (%.2f cores) and no thread blocks %.0f times a second or more", u, MixedSwitchesPerSec)
		d.ruledOut = append(d.ruledOut, RuledOut{"off-cpu waits", fmt.Sprintf("%d voluntary switches over %.2f s (%.1f/s); no thread under half a core switches %.0f/s or more", st.Sched.Voluntary, wall, float64(st.Sched.Voluntary)/wall, MixedSwitchesPerSec)})
	default:
		d.verdict, d.off = VerdictOffCPU, true
		d.sentence = fmt.Sprintf("Off CPU: only %.2f cores used over %.2f s (%d voluntary switches): the threads wait; find on what.", u, wall, st.Sched.Voluntary)
		d.noCPU = fmt.Sprintf("%.2f cores used (below %.2f): there is little CPU time to sample", u, report.OnCPUCores)
		d.ruledOut = append(d.ruledOut, RuledOut{"on-cpu work", fmt.Sprintf("%.2f cores used over %.2f s (user %.2f s, system %.2f s), below %.2f", u, wall, st.CPU.UserS, st.CPU.SystemS, report.OnCPUCores)})
	}
	d.evidence["voluntary_ctxt_switches"] = st.Sched.Voluntary
	d.evidence["nonvoluntary_ctxt_switches"] = st.Sched.Nonvoluntary
	return d
}

func threadName(t report.Thread) string {
	if t.PythonName != "" {
		return t.PythonName
	}
	if t.Name != "" {
		return t.Name
	}
	return t.Comm
}

func hasVerdict(st *report.Stat, v string) bool {
	for _, x := range st.Verdicts {
		if x == v {
			return true
		}
	}
	return false
}

// apply writes phase 1 into the report: the counters, the verdict, the
// ruled-out list and stat's other findings.
func (r *run) apply(d decision) {
	rep, st, pid := r.rep, r.rep.Stat, r.s.Pid
	rep.Verdict, rep.Decision = d.verdict, d.sentence
	rep.Counters = Counters{WindowS: round(st.WindowS, 3), Utilization: round(st.CPU.Utilization, 4), UserS: st.CPU.UserS, SystemS: st.CPU.SystemS,
		Voluntary: st.Sched.Voluntary, Nonvoluntary: st.Sched.Nonvoluntary, RunqueueWaitS: round(st.Sched.RunqueueWaitS, 4),
		RunqueueShare: round(st.Sched.RunqueueShare, 4), Cgroup: st.Cgroup.Path, NrPeriods: st.Cgroup.NrPeriods, NrThrottled: st.Cgroup.NrThrottled,
		ThrottledS: round(st.Cgroup.ThrottledS, 4), QuotaCores: st.Cgroup.QuotaCores, RSSBytes: st.Memory.RSSBytes,
		RSSDeltaBytes: st.Memory.RSSDeltaBytes, Threads: len(st.Threads), StatVerdicts: append([]string{}, st.Verdicts...)}
	if p := st.Pressure.CPU; p != nil {
		v := p.SomePct
		rep.Counters.CPUPressureSomePct = &v
	}
	win := fmt.Sprintf("%.0fs", math.Max(1, math.Round(st.WindowS)))
	cmd := fmt.Sprintf("pyobs stat -p %d -d %s", pid, win)
	rep.Findings = append(rep.Findings, Finding{Phase: PhaseCount, Kind: d.verdict, Summary: d.sentence, Evidence: d.evidence, Command: cmd, Weight: 1})
	rep.RuledOut = append(rep.RuledOut, d.ruledOut...)
	rep.Findings = append(rep.Findings, d.extra...)
	// stat's other verdicts, with their own evidence and next command.
	for _, f := range st.Findings {
		switch f.Code {
		case "on-cpu", "off-cpu", "cpu-throttled", "runqueue-saturated", "multiplexed":
			// the decision's own (and the counters' scaling, in the notes)
			continue
		case "stopped":
			if d.verdict == VerdictStopped {
				continue // the verdict says it
			}
		}
		ev := map[string]any{}
		for k, v := range f.Evidence {
			ev[k] = v
		}
		rep.Findings = append(rep.Findings, Finding{Phase: PhaseCount, Kind: f.Code, Summary: f.Sentence, Evidence: ev, Command: cmd, Weight: 0.3})
	}
	if st.Memory.RSSDeltaBytes > 0 && st.WindowS > 0 {
		rate := float64(st.Memory.RSSDeltaBytes) / st.WindowS
		if rate >= 10<<20 {
			rep.Findings = append(rep.Findings, Finding{Phase: PhaseCount, Kind: "memory-growth",
				Summary:  fmt.Sprintf("RSS grew %.1f MiB over %.2f s (%.1f MiB/s), now %.1f MiB.", float64(st.Memory.RSSDeltaBytes)/(1<<20), st.WindowS, rate/(1<<20), float64(st.Memory.RSSBytes)/(1<<20)),
				Evidence: map[string]any{"rss_delta_bytes": st.Memory.RSSDeltaBytes, "rss_bytes": st.Memory.RSSBytes}, Command: cmd, Weight: 0.4})
		}
	}
}

// hottest folds a cpu profile by its innermost Python frame per function.
func hottest(p *flame.Profile, n int) []Hot {
	type fn struct{ function, file string }
	type agg struct {
		w     int64
		lines map[int]int64
	}
	by := map[fn]*agg{}
	var total int64
	p.EachStack(func(s *flame.Stack) {
		total += s.Weight
		for i := len(s.Frames) - 1; i >= 0; i-- {
			f := p.Frame(s.Frames[i])
			if f.Kind != flame.Python {
				continue
			}
			k := fn{f.Function, f.File}
			a := by[k]
			if a == nil {
				a = &agg{lines: map[int]int64{}}
				by[k] = a
			}
			a.w += s.Weight
			a.lines[f.Line] += s.Weight
			return
		}
	})
	out := []Hot{}
	for k, a := range by {
		line, lw := 0, int64(-1)
		for l, w := range a.lines {
			if w > lw || (w == lw && l < line) {
				line, lw = l, w
			}
		}
		out = append(out, Hot{Function: k.function, File: k.file, Line: line, Samples: a.w, Percent: round(100*float64(a.w)/float64(max(total, 1)), 2)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Samples != out[j].Samples {
			return out[i].Samples > out[j].Samples
		}
		return out[i].Function+out[i].File < out[j].Function+out[j].File
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func (r *run) cpuFindings(p *flame.Profile, budget time.Duration) {
	cmd := fmt.Sprintf("pyobs record -p %d -d %s -o cpu.svg", r.s.Pid, fmtSecs(budget))
	for i, h := range r.rep.Hottest {
		if i >= 3 || h.Percent < 100*FindingShare {
			break
		}
		r.rep.Findings = append(r.rep.Findings, Finding{Phase: PhaseCPU, Kind: "hot-function",
			Summary:  fmt.Sprintf("%s (%s:%d) is the innermost Python frame of %.1f %% of the on-CPU samples.", h.Function, h.File, h.Line, h.Percent),
			Evidence: map[string]any{"percent": h.Percent, "samples": h.Samples, "total_samples": p.Meta.Samples},
			// Under the verdict's 1, as the other findings are: a busy
			// thread's 100 % at 1.01 cores (a tick's rounding) outranked it.
			Command: cmd, Weight: round(min(h.Percent/100*r.rep.Counters.Utilization, 0.99), 4)})
	}
	if p.Meta.Samples == 0 {
		r.rep.Notes = append(r.rep.Notes, "the on-CPU phase took no samples: the target did not run while it was sampled")
	}
}

// waits folds an offcpu profile (--threads, maybe --waker) by wait class
// and innermost Python frame, summed over threads.
func waits(p *flame.Profile, n int) []Wait {
	type key struct {
		class, function, file string
		line                  int
	}
	type agg struct {
		us      int64
		threads map[int]bool
		wakers  map[string]int64
	}
	by := map[key]*agg{}
	p.EachStack(func(s *flame.Stack) {
		if len(s.Frames) == 0 {
			return
		}
		end := len(s.Frames) - 1
		waker := ""
		for i, id := range s.Frames {
			if f := p.Frame(id); f.Kind == flame.State && strings.HasPrefix(f.Function, offcpu.WokenBy) && i > 0 {
				end, waker = i-1, strings.TrimPrefix(f.Function, offcpu.WokenBy)
				break
			}
		}
		// A wake-up in interrupt context is the interrupt's, whichever
		// thread it interrupted: one waker per kind of interrupt.
		if k := offcpu.InterruptKind(waker); k != "" {
			waker = k
		}
		leaf := p.Frame(s.Frames[end]).Function
		class := strings.Trim(leaf, "[]")
		if leaf == "[on-CPU]" || class == offcpu.ClassRunQueue {
			return
		}
		k := key{class: class, function: "[not read]"}
		tid := -1
		for i := end - 1; i >= 0; i-- {
			f := p.Frame(s.Frames[i])
			if f.Kind == flame.Python && k.file == "" {
				k.function, k.file, k.line = f.Function, f.File, f.Line
			}
			if f.Kind == flame.Thread {
				tid = s.Frames[i]
			}
		}
		a := by[k]
		if a == nil {
			a = &agg{threads: map[int]bool{}, wakers: map[string]int64{}}
			by[k] = a
		}
		a.us += s.Weight
		a.threads[tid] = true
		if waker != "" {
			a.wakers[waker] += s.Weight
		}
	})
	out := []Wait{}
	for k, a := range by {
		w := Wait{Class: k.class, Function: k.function, File: k.file, Line: k.line, Seconds: round(float64(a.us)/1e6, 4), Threads: len(a.threads)}
		var best int64
		for name, us := range a.wakers {
			if us > best || (us == best && name < w.Waker) {
				w.Waker, best = name, us
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seconds != out[j].Seconds {
			return out[i].Seconds > out[j].Seconds
		}
		return out[i].Function < out[j].Function
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// hypothesis is what phase 3 gives phase 4 to test.
type hypothesis struct {
	text     string
	syscalls string
	wait     Wait
}

// classSyscalls: the calls a wait class blocks in (what phase 4 traces).
// Locks, the GIL and sleeps are not traced: the waker says who releases.
var classSyscalls = map[string]string{
	offcpu.ClassPipe: "read,readv,pread64",
	offcpu.ClassNet:  "recvfrom,recvmsg,sendto,sendmsg,accept4,connect,poll,ppoll,select,pselect6,epoll_wait,epoll_pwait",
	offcpu.ClassDisk: "read,write,pread64,pwrite64,openat,fsync,fdatasync",
}

func (r *run) offFindings(res *offcpu.Result) *hypothesis {
	rep, pid := r.rep, r.s.Pid
	window := max(res.WindowS, 1e-3)
	cmd := fmt.Sprintf("pyobs offcpu -p %d -d %s --waker -o wait.svg", pid, fmtSecs(time.Duration(window*float64(time.Second))))
	idle := 0.0
	if res.Excluded != nil {
		idle = float64(res.Excluded.US) / 1e6
	}
	blocked := 0.0
	for _, w := range rep.Waits {
		blocked += w.Seconds
	}
	if idle > 0 {
		rep.RuledOut = append(rep.RuledOut, RuledOut{"idle waits", fmt.Sprintf("%.3f s of waits in an event loop's select, a Condition/Event/Queue wait or a join: idle by construction, not counted as findings", idle)})
	}
	if rep.Verdict == VerdictOffCPU && blocked < IdleShare*window {
		rep.Verdict = VerdictIdle
		rep.Decision = fmt.Sprintf("Idle: %.2f cores used, and the waits that are not idle by construction sum to %.3f s over %.2f s (idle waits %.3f s): nothing to speed up here.",
			rep.Counters.Utilization, blocked, window, idle)
		rep.Findings = append(rep.Findings, Finding{Phase: PhaseOffCPU, Kind: VerdictIdle, Summary: rep.Decision,
			Evidence: map[string]any{"non_idle_wait_s": round(blocked, 4), "idle_wait_s": round(idle, 4), "window_s": round(window, 3)}, Command: cmd, Weight: 1})
	}
	var hyp *hypothesis
	for i, w := range rep.Waits {
		share := w.Seconds / window
		weight := w.Seconds / max(blocked, 1e-9) // its share of the waits: below the verdict's 1
		if i >= 3 || share < FindingShare {
			break
		}
		who := ""
		switch {
		case offcpu.InterruptKind(w.Waker) != "":
			who = ", woken in interrupt context (" + w.Waker + "), not by a thread"
		case w.Waker != "":
			who = ", woken by " + w.Waker
		}
		ev := map[string]any{"seconds": w.Seconds, "window_s": round(window, 3), "threads": w.Threads, "class": w.Class}
		if w.Waker != "" {
			ev["waker"] = w.Waker
		}
		rep.Findings = append(rep.Findings, Finding{Phase: PhaseOffCPU, Kind: "wait",
			Summary: fmt.Sprintf("%d thread(s) wait (%s) in %s: %.3f s over %.2f s (%.0f %% of the window)%s.",
				w.Threads, w.Class, site(w.Function, w.File, w.Line), w.Seconds, window, 100*share, who),
			Evidence: ev, Command: cmd, Weight: round(min(weight, 0.99), 4)})
		if sc, ok := classSyscalls[w.Class]; ok && hyp == nil {
			hyp = &hypothesis{wait: w, syscalls: sc,
				text: fmt.Sprintf("%s blocks in %s calls (%s): the trace times them and names their Python sites", site(w.Function, w.File, w.Line), w.Class, sc)}
		}
	}
	allWaits := 0.0
	for class, v := range res.ClassS {
		if class != offcpu.ClassRunQueue {
			allWaits += v
		}
	}
	if c := res.ClassS[offcpu.ClassGIL]; c >= FindingShare*window {
		rep.Findings = append(rep.Findings, Finding{Phase: PhaseOffCPU, Kind: "gil",
			Summary:  fmt.Sprintf("Threads waited %.3f s for the GIL over %.2f s.", c, window),
			Evidence: map[string]any{"gil_s": round(c, 4)}, Command: fmt.Sprintf("pyobs record -p %d --mode gil", pid), Weight: round(min(c/allWaits, 0.99), 4)})
	}
	if rq := res.ClassS[offcpu.ClassRunQueue]; rq < FindingShare*window {
		rep.RuledOut = append(rep.RuledOut, RuledOut{"run-queue while blocked", fmt.Sprintf("%.3f s runnable but not running over the %.2f s off-CPU window", rq, window)})
	}
	return hyp
}

func (r *run) traceFindings(res *trace.Result, hyp *hypothesis, budget time.Duration) {
	rep := r.rep
	inProg := map[string]int{}
	site := map[string]string{}
	for _, b := range res.Blocked {
		inProg[b.Name]++
		if b.Site != nil && site[b.Name] == "" {
			site[b.Name] = fmt.Sprintf("%s (%s:%d)", b.Function, b.File, b.Line)
		}
	}
	seen := map[string]bool{}
	for _, row := range res.Syscalls {
		sc := Syscall{Name: row.Name, Calls: row.Calls, Errors: row.Errors, TotalS: round(row.TotalS, 4), P50US: row.P50US, P99US: row.P99US, InProgress: inProg[row.Name]}
		if len(row.TopSites) > 0 {
			s := row.TopSites[0]
			sc.Site = fmt.Sprintf("%s (%s:%d)", s.Function, s.File, s.Line)
		} else {
			sc.Site = site[row.Name]
		}
		seen[row.Name] = true
		rep.Syscalls = append(rep.Syscalls, sc)
	}
	for name, n := range inProg {
		if !seen[name] {
			rep.Syscalls = append(rep.Syscalls, Syscall{Name: name, InProgress: n, Site: site[name]})
		}
	}
	sort.Slice(rep.Syscalls, func(i, j int) bool {
		a, b := rep.Syscalls[i], rep.Syscalls[j]
		if a.TotalS != b.TotalS {
			return a.TotalS > b.TotalS
		}
		return a.Name < b.Name
	})
	cmd := fmt.Sprintf("pyobs trace -p %d -e %s -d %s", r.s.Pid, hyp.syscalls, fmtSecs(budget))
	wall := max(res.Account.Wall.Seconds(), 1e-3)
	for i, sc := range rep.Syscalls {
		if i >= 2 {
			break
		}
		where := ""
		if sc.Site != "" {
			where = " at " + sc.Site
		}
		ev := map[string]any{"syscall": sc.Name, "calls": sc.Calls, "total_s": sc.TotalS, "p50_us": sc.P50US, "p99_us": sc.P99US, "in_progress": sc.InProgress}
		sum := fmt.Sprintf("%s: %d calls took %.3f s over %.2f s (p50 %.0f µs, p99 %.0f µs)%s", sc.Name, sc.Calls, sc.TotalS, wall, sc.P50US, sc.P99US, where)
		if sc.InProgress > 0 {
			sum += fmt.Sprintf("; %d still blocked at the end", sc.InProgress)
		}
		rep.Findings = append(rep.Findings, Finding{Phase: PhaseTrace, Kind: "syscall", Summary: sum + " (hypothesis: " + hyp.text + ").",
			Evidence: ev, Command: cmd, Weight: round(min(sc.TotalS/wall, 1)*0.9, 4)})
	}
	if len(rep.Syscalls) == 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("phase 4 saw no %s call complete or start in %.2f s: the wait predates the trace (see the waits)", hyp.syscalls, wall))
	}
}

// site is a Python frame as "function (file:line)", or the function alone
// when it has no file ("[not read]").
func site(function, file string, line int) string {
	if file == "" {
		return function
	}
	return fmt.Sprintf("%s (%s:%d)", function, file, line)
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Weight > fs[j].Weight })
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func fmtSecs(d time.Duration) string {
	return fmt.Sprintf("%.0fs", math.Max(1, math.Round(d.Seconds())))
}
