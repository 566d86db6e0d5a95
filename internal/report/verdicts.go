package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
)

// Thresholds of the verdicts (the seed's decision procedure). Each finding
// states the one it crossed.
const (
	OnCPUCores       = 0.5  // cores used: at or above → on-cpu, below → off-cpu
	RunqueueShare    = 0.25 // run-queue wait / (on-CPU + wait)
	RunqueueMinS     = 0.1  // … and at least this much wait per wall second
	SwitchRatio      = 4.0  // one kind of context switch ≥ 4× the other
	ContentionPerSec = 20.0 // nonvoluntary switches per second
	// ContentionShare: … and, where schedstat says, at least this share of
	// the time it wanted a CPU spent waiting for one (a preemption that
	// costs no wait is the scheduler's time slice, not contention).
	ContentionShare   = 0.05
	BlockingPerSec    = 5.0 // voluntary switches per second
	MajorFaultsPerSec = 10.0
	FDPressure        = 0.8 // fds used / soft RLIMIT_NOFILE
	MemoryPSIPct      = 10.0
	GILThreadCores    = 0.1 // a Python thread "wants the CPU" when it uses this much
	// StoppedJudge: below this share of the window left running (the rest
	// the whole target was stopped by someone else), on- or off-CPU is not
	// judged: there is too little running time to say.
	StoppedJudge = 0.1
)

func (st *Stat) add(f Finding) {
	st.Verdicts = append(st.Verdicts, f.Code)
	st.Findings = append(st.Findings, f)
}

func judge(st *Stat, in Input, wall float64) {
	pid := st.Pid
	u := st.CPU.Utilization
	// A target stopped by someone else uses no CPU and waits on nothing of
	// its own: say so first, and judge the rest over the time it ran.
	over := fmt.Sprintf("%.2f s", wall)
	if s := st.Stopped; s != nil {
		whole := s.Threads >= s.Of
		run := wall - s.Seconds
		ps := procfs.Stops{Threads: s.Threads, Of: s.Of, State: s.State, Processes: s.Processes, Members: s.Members}
		f := Finding{Code: "stopped",
			Sentence: fmt.Sprintf("Stopped: %s stopped %s for about %.1f s of the %.2f s window (%.0f %%): a stopped thread runs nothing and waits on nothing of its own.",
				ps.Who(), ps.By(), s.Seconds, wall, 100*s.Share),
			Evidence:  map[string]float64{"stopped_s": s.Seconds, "stopped_share": s.Share, "threads_stopped": float64(s.Threads), "threads": float64(s.Of)},
			Threshold: fmt.Sprintf("a thread seen in state T or t at a look (every %d ms)", s.LookMS),
			Next:      fmt.Sprintf("kill -CONT %d (or fg in its shell) and measure again while it runs", pid)}
		if len(s.Pids) > 0 { // a set: the processes that were stopped
			f.Next = fmt.Sprintf("kill -CONT %s (or fg in their shell) and measure again while they run", joinInts(s.Pids))
		}
		if s.State == "t" {
			f.Next = fmt.Sprintf("find the tracer (grep TracerPid /proc/%d/status) and measure again once it lets go", pid)
			if len(s.Pids) > 0 {
				f.Next = fmt.Sprintf("find the tracer (grep TracerPid /proc/PID/status for %s) and measure again once it lets go", joinInts(s.Pids))
			}
		}
		switch {
		case whole && run < StoppedJudge*wall:
			f.Sentence += " On or off CPU is not judged: it hardly ran."
			st.add(f)
			judgeRest(st, in, wall, u, "", false)
			return
		case whole:
			f.Sentence += fmt.Sprintf(" The verdicts below are over the %.2f s it was not stopped.", run)
			u = round((st.CPU.UserS+st.CPU.SystemS)/run, 4)
			wall = run
			over = fmt.Sprintf("the %.2f s it was not stopped", run)
		}
		st.add(f)
	}
	judgeRest(st, in, wall, u, over, true)
}

// judgeRest is every verdict but the stop: over wall seconds (the window,
// or the part of it the target was not stopped) at u cores; cpu false
// leaves on- and off-CPU out.
func judgeRest(st *Stat, in Input, wall, u float64, over string, cpu bool) {
	pid := st.Pid
	vol, nonvol := float64(st.Sched.Voluntary), float64(st.Sched.Nonvoluntary)
	// Demand is CPU used plus time spent runnable but waiting for a CPU (run
	// queue, cgroup throttling): a queued thread is CPU-bound, not blocked.
	cpuWait := max(st.Sched.RunqueueWaitS, st.Cgroup.ThrottledS) / wall // schedstat wait includes throttled time
	demand := u + cpuWait
	switch {
	case !cpu:
	case demand >= OnCPUCores:
		f := Finding{Code: "on-cpu",
			Sentence:  fmt.Sprintf("On CPU: %.2f cores used over %s (user %.2f s, system %.2f s); profile where the time goes.", u, over, st.CPU.UserS, st.CPU.SystemS),
			Evidence:  map[string]float64{"utilization": u, "user_s": st.CPU.UserS, "system_s": st.CPU.SystemS, "cpu_wait_per_s": round(cpuWait, 4)},
			Threshold: fmt.Sprintf("utilization + CPU wait (run queue, throttling) >= %.2f cores", OnCPUCores),
			Next:      fmt.Sprintf("pyobs record -p %d", pid)}
		if cpuWait >= 0.1 {
			f.Sentence = fmt.Sprintf("On CPU: it wants %.2f cores — %.2f used plus %.2f spent runnable but waiting for a CPU (see below); profile where the time goes, and give it the CPU it waits for.", demand, u, cpuWait)
		}
		st.add(f)
	default:
		st.add(Finding{Code: "off-cpu",
			Sentence:  fmt.Sprintf("Off CPU: only %.2f cores used over %s; the threads mostly wait (sleep, lock, I/O), so find what they wait on.", u, over),
			Evidence:  map[string]float64{"utilization": u, "voluntary_ctxt_switches": vol, "nonvoluntary_ctxt_switches": nonvol, "cpu_wait_per_s": round(cpuWait, 4)},
			Threshold: fmt.Sprintf("utilization + CPU wait (run queue, throttling) < %.2f cores", OnCPUCores),
			Next:      fmt.Sprintf("pyobs offcpu -p %d", pid)})
	}
	if st.Cgroup.NrThrottled > 0 {
		msPerS := st.Cgroup.ThrottledS * 1000 / wall
		q := "no quota read"
		ev := map[string]float64{"nr_throttled": float64(st.Cgroup.NrThrottled), "nr_periods": float64(st.Cgroup.NrPeriods),
			"throttled_s": st.Cgroup.ThrottledS, "throttled_ms_per_s": round(msPerS, 3)}
		if st.Cgroup.QuotaCores != nil {
			q = fmt.Sprintf("quota %.2f cores", *st.Cgroup.QuotaCores)
			ev["quota_cores"] = *st.Cgroup.QuotaCores
		}
		st.add(Finding{Code: "cpu-throttled",
			Sentence: fmt.Sprintf("CPU-throttled by its cgroup %s (v%d, %s): throttled in %d of %d periods, %.0f ms per second.",
				st.Cgroup.Path, st.Cgroup.Version, q, st.Cgroup.NrThrottled, st.Cgroup.NrPeriods, msPerS),
			Evidence:  ev,
			Threshold: "nr_throttled grew in the window (> 0)",
			Next:      "raise the cgroup's CPU quota (v1 cpu.cfs_quota_us, v2 cpu.max) or use fewer busy threads"})
	}
	// schedstat's wait holds the time the cgroup was throttled (judged
	// above, its own cause): the run queue and contention verdicts are on
	// the rest. The cgroup's figure is wall time; a thread's wait
	// overlaps it at most once, so several threads throttled together
	// leave some of it here.
	rqWait, rqShare := st.Sched.RunqueueWaitS, st.Sched.RunqueueShare
	if st.Cgroup.ThrottledS > 0 {
		rqWait = max(0, rqWait-st.Cgroup.ThrottledS)
		if rqShare = 0; rqWait+st.Sched.OnCPUS > 0 {
			rqShare = rqWait / (rqWait + st.Sched.OnCPUS)
		}
	}
	waitPerS := rqWait / wall
	if st.Sched.SchedstatAvail && rqShare >= RunqueueShare && waitPerS >= RunqueueMinS {
		st.add(Finding{Code: "runqueue-saturated",
			Sentence: fmt.Sprintf("Run queue saturated: runnable threads waited %.3f s for a CPU (%.0f %% of the time they wanted one)%s: you are queued, not slow.",
				rqWait, 100*rqShare, throttledApart(st)),
			Evidence:  map[string]float64{"runqueue_wait_s": round(rqWait, 6), "runqueue_wait_share": round(rqShare, 4), "on_cpu_s": st.Sched.OnCPUS},
			Threshold: fmt.Sprintf("wait share >= %.0f %% and wait >= %.2f s per second", 100*RunqueueShare, RunqueueMinS),
			Next:      "see what else runs on these CPUs (top -H, the cgroup's cpu.pressure); check affinity (taskset -p) and the CPU count"})
	}
	waited := !st.Sched.SchedstatAvail || rqShare >= ContentionShare
	if nonvol/wall >= ContentionPerSec && nonvol >= SwitchRatio*max(vol, 1) && waited {
		ev := map[string]float64{"nonvoluntary_ctxt_switches": nonvol, "voluntary_ctxt_switches": vol, "nonvoluntary_per_s": round(nonvol/wall, 2)}
		cost := ""
		if st.Sched.SchedstatAvail {
			ev["runqueue_wait_share"] = round(rqShare, 4)
			cost = fmt.Sprintf(", waiting %.0f %% of the time it wanted a CPU%s", 100*rqShare, throttledApart(st))
		}
		st.add(Finding{Code: "cpu-contention",
			Sentence: fmt.Sprintf("CPU contention: %d involuntary context switches (%.0f/s) against %d voluntary: the scheduler keeps preempting it for other work%s.",
				st.Sched.Nonvoluntary, nonvol/wall, st.Sched.Voluntary, cost),
			Evidence: ev,
			Threshold: fmt.Sprintf("nonvoluntary >= %.0f/s and >= %.0fx voluntary, and (schedstat) run-queue wait >= %.0f %% of the time it wanted a CPU",
				ContentionPerSec, SwitchRatio, 100*ContentionShare),
			Next: "find the competing load on these CPUs (top, pidstat -w), or give the process more CPUs"})
	}
	if cpu && demand < OnCPUCores && vol/wall >= BlockingPerSec && vol >= SwitchRatio*max(nonvol, 1) {
		w, n := topWchan(in.Wchans)
		ev := map[string]float64{"voluntary_ctxt_switches": vol, "nonvoluntary_ctxt_switches": nonvol, "voluntary_per_s": round(vol/wall, 2)}
		where := ""
		if w != "" {
			where = fmt.Sprintf("; most often seen waiting in %s (%d polls)", w, n)
			ev["wchan_polls"] = float64(n)
		}
		st.add(Finding{Code: "blocking",
			Sentence:  fmt.Sprintf("Blocking: %d voluntary context switches (%.0f/s) against %d involuntary: it gives up the CPU to wait%s.", st.Sched.Voluntary, vol/wall, st.Sched.Nonvoluntary, where),
			Evidence:  ev,
			Threshold: fmt.Sprintf("voluntary >= %.0f/s and >= %.0fx nonvoluntary, and off-cpu", BlockingPerSec, SwitchRatio),
			Next:      fmt.Sprintf("pyobs offcpu -p %d (where it blocks), pyobs trace -p %d (which syscalls)", pid, pid)})
	}
	if tids, polls := dState(in.States, in.DNotIO); len(tids) > 0 {
		w := ""
		for _, t := range st.Threads {
			if t.State == "D" && t.Wchan != "" {
				w = " (in " + t.Wchan + ")"
				break
			}
		}
		st.add(Finding{Code: "blocking-io",
			Sentence: fmt.Sprintf("Blocking I/O: %d thread(s) seen in uninterruptible sleep (D) in %d polls%s; block I/O read %s, written %s.",
				len(tids), polls, w, humanBytes(st.IO.ReadBytes), humanBytes(st.IO.WriteBytes)),
			Evidence:  map[string]float64{"threads_in_d": float64(len(tids)), "d_polls": float64(polls), "read_bytes": float64(st.IO.ReadBytes), "write_bytes": float64(st.IO.WriteBytes)},
			Threshold: "a thread in state D in at least one poll",
			Next:      fmt.Sprintf("pyobs offcpu -p %d; iostat -x 1 for the device", pid)})
	}
	if mf := float64(st.Memory.MajorFaults); mf/wall >= MajorFaultsPerSec {
		st.add(Finding{Code: "major-faults",
			Sentence:  fmt.Sprintf("Major page faults: %d (%.0f/s): pages are read from disk or swap on access.", st.Memory.MajorFaults, mf/wall),
			Evidence:  map[string]float64{"major_faults": mf, "major_faults_per_s": round(mf/wall, 2), "swap_bytes": float64(st.Memory.SwapBytes)},
			Threshold: fmt.Sprintf("major faults >= %.0f/s", MajorFaultsPerSec),
			Next:      "check memory limits and swap (the memory-pressure line); mlock or prefetch hot files"})
	}
	if p := st.Pressure.Memory; p != nil && p.SomePct >= MemoryPSIPct {
		st.add(Finding{Code: "memory-pressure",
			Sentence:  fmt.Sprintf("Memory pressure (%s): tasks stalled on memory %.1f %% of the window.", st.Pressure.Source, p.SomePct),
			Evidence:  map[string]float64{"memory_some_pct": p.SomePct, "rss_bytes": float64(st.Memory.RSSBytes)},
			Threshold: fmt.Sprintf("PSI memory some >= %.0f %% of the window", MemoryPSIPct),
			Next:      "raise the memory limit or reduce the working set; watch major faults and swap"})
	}
	if st.IO.FDLimit > 0 && float64(st.IO.FDs) >= FDPressure*float64(st.IO.FDLimit) {
		st.add(Finding{Code: "fd-pressure",
			Sentence:  fmt.Sprintf("File descriptors: %d open of a soft limit of %d (%.0f %%).", st.IO.FDs, st.IO.FDLimit, 100*float64(st.IO.FDs)/float64(st.IO.FDLimit)),
			Evidence:  map[string]float64{"fds": float64(st.IO.FDs), "fd_limit": float64(st.IO.FDLimit)},
			Threshold: fmt.Sprintf("fds >= %.0f %% of RLIMIT_NOFILE", 100*FDPressure),
			Next:      "ls -l " + procfs.Default().Path(pid, "fd") + " to see what leaks; raise the limit (ulimit -n / LimitNOFILE=)"})
	}
	if in.Python && !in.NoGIL {
		busy := 0
		for _, t := range st.Threads {
			if t.PythonName != "" && t.Utilization >= GILThreadCores {
				busy++
			}
		}
		if busy >= 2 && u >= 0.7 && u <= 1.3 {
			st.add(Finding{Code: "gil-bound",
				Sentence:  fmt.Sprintf("GIL-bound: %d Python threads each want the CPU but together use %.2f cores: they take turns holding the GIL.", busy, u),
				Evidence:  map[string]float64{"busy_python_threads": float64(busy), "utilization": u},
				Threshold: fmt.Sprintf(">= 2 Python threads using >= %.1f core each, total 0.7..1.3 cores", GILThreadCores),
				Next:      fmt.Sprintf("pyobs record -p %d --mode gil", pid)})
		}
	}
	var mux []string
	for _, c := range st.Counters {
		if c.Supported && c.Estimate {
			mux = append(mux, fmt.Sprintf("%s %.0f%%", c.Event, c.RunningPct))
		}
	}
	if len(mux) > 0 {
		st.add(Finding{Code: "multiplexed",
			Sentence:  "Some counters are estimates: the PMU was shared, so they were counted part of the time and scaled (" + strings.Join(mux, ", ") + ").",
			Evidence:  map[string]float64{"multiplexed_events": float64(len(mux))},
			Threshold: "time_running < time_enabled for a counter",
			Next:      "count fewer hardware events at once for exact values"})
	}
}

func topWchan(m map[int]map[string]int) (string, int) {
	tot := map[string]int{}
	for _, ws := range m {
		for w, n := range ws {
			tot[w] += n
		}
	}
	best, n := "", 0
	for w, c := range tot {
		if c > n || (c == n && w < best) {
			best, n = w, c
		}
	}
	return best, n
}

// throttledApart says that the cgroup's throttled time was taken out of
// a run-queue figure.
func throttledApart(st *Stat) string {
	if st.Cgroup.ThrottledS > 0 {
		return fmt.Sprintf(", besides the %.3f s its cgroup was throttled", st.Cgroup.ThrottledS)
	}
	return ""
}

func dState(m map[int]map[string]int, notIO map[int]int) ([]int, int) {
	var tids []int
	polls := 0
	for tid, s := range m {
		if n := s["D"] - notIO[tid]; n > 0 {
			tids = append(tids, tid)
			polls += n
		}
	}
	sort.Ints(tids)
	return tids, polls
}

func joinInts(l []int) string {
	w := make([]string, len(l))
	for i, n := range l {
		w[i] = strconv.Itoa(n)
	}
	return strings.Join(w, " ")
}
