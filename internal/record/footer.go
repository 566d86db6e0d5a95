package record

import (
	"fmt"

	"github.com/pyobs/pyobs/internal/flame"
)

// Footer is the recording's one-line account for stderr: rates, what was
// lost, torn or late, the native unwinds, pyobs's own CPU and where it wrote.
func Footer(p *flame.Profile, out string) string {
	m := p.Meta
	rate := fmt.Sprintf("requested %g Hz, achieved %.0f Hz", m.RequestedHz, m.AchievedHz)
	if m.Mode == "cpu" {
		rate += " per CPU-second of the target"
		if m.StackReads > 0 && m.StackReads < m.Samples {
			rate += fmt.Sprintf("; %d stack reads, each for the samples since the thread's previous read", m.StackReads)
		}
	}
	obs := ""
	if m.DurationS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*m.ObserverCPUS/m.DurationS)
	}
	if m.ObserverSetupCPUS > 0 {
		obs += fmt.Sprintf(", %.2fs more before the recording began (loading the sampler)", m.ObserverSetupCPUS)
	}
	where := "stdout"
	if out != "" && out != "-" {
		where = out
	}
	lag := ""
	if m.ReadLagUS > 0 {
		lag = fmt.Sprintf(", late %d (mean read lag %.0f µs), moved %d", m.Late, m.ReadLagUS, m.Moved)
	}
	nat := ""
	if x := m.Mixed; x != nil && x.NativeFull+x.NativeTruncated+x.NativeFailed > 0 {
		n := x.NativeFull + x.NativeTruncated + x.NativeFailed
		nat = fmt.Sprintf("; native stacks: %d unwound fully (%.1f %%), %d truncated, %d failed, %d merge mismatches",
			x.NativeFull, 100*float64(x.NativeFull)/float64(n), x.NativeTruncated, x.NativeFailed, x.MergeMismatch)
		switch {
		case m.Engine == EngineBPF:
			nat += fmt.Sprintf(", %d glued by C-stack address, %d by counting the walk's entry frames (%d with an interpreter frame entering or leaving its Python frame at the sample)",
				x.MergeLinked, x.MergeCounted, x.MergeTransit)
		case x.MergeLinked > 0:
			nat += fmt.Sprintf(", %d glued by C-stack address (%d with Python frames returned before read)", x.MergeLinked, x.MergeGone)
		}
	}
	if x := m.Mixed; x != nil && m.Engine == EngineBPF && x.KernelStacks+x.KernelStacksLost > 0 {
		nat += fmt.Sprintf("; kernel stacks: %d samples in the kernel, %d of them without their stack (the kernel's stack map was full)", x.KernelStacks+x.KernelStacksLost, x.KernelStacksLost)
	}
	unobs := ""
	if m.UnobservedS > 0 {
		unobs = fmt.Sprintf("; the command's first %.2fs (its start-up, the sampler's loading) ran before the recording began", m.UnobservedS)
	}
	if m.TargetExited {
		unobs += fmt.Sprintf("; the target exited after %.1fs, which ended the recording", m.DurationS)
	}
	if m.Execed != "" {
		unobs += fmt.Sprintf("; the target exec'd (%s): the recording ended there, %d samples not named from the program sampled ([lost to the exec])", m.Execed, m.LostToExec)
	}
	return fmt.Sprintf("pyobs record: %s mode%s, %d samples in %.1fs (%s)%s%s; lost %d, torn %d, failed %d, throttled %d%s%s; observer CPU %.2fs%s; pyobs stopped the target 0s; wrote %s",
		m.Mode, engineNote(m), m.Samples, m.DurationS, rate, unobs, stoppedNote(m), m.Lost, m.Torn, m.Failed, m.Throttled, lag, nat, m.ObserverCPUS, obs, where)
}

// engineNote says how cpu mode took its stacks: walked in the kernel at
// the sample (and how those walks ended, what they cost), or read from
// user space after it.
func engineNote(m flame.Meta) string {
	switch m.Engine {
	case EnginePerf:
		return " (perf engine: " + UserSpaceNote + ")"
	case EngineBPF:
	case "":
		if m.Mode == "wall" || m.Mode == "gil" {
			return " (stacks read from user space at each timer tick)"
		}
		return ""
	default:
		return ""
	}
	pct := 0.0
	if walked := m.Exact + m.KernelTruncated + m.KernelFaulted + m.KernelInvalid; walked > 0 {
		pct = 100 * float64(m.Exact) / float64(walked)
	}
	bpf := "n/a"
	if m.BPFNSPerSample > 0 {
		bpf = fmt.Sprintf("%.2f µs", m.BPFNSPerSample/1e3)
	}
	per := perSample(m)
	mapOnly := ""
	if m.MapOnly {
		mapOnly = " (thread states from the tid map alone: the threads agreed on no TLS offset, so a thread is walked only once user space has mapped it)"
	}
	held := ""
	if m.BeforePython > 0 {
		held = fmt.Sprintf(", before the interpreter %d (the held command sampled from its exec)", m.BeforePython)
	}
	if m.HeldS > 0 {
		held += fmt.Sprintf("; the command waited %.2fs before its exec while the walker loaded, its layout %s", m.HeldS, m.HeldLayout)
	}
	partly := ""
	if m.NamesByAge != "" {
		partly = fmt.Sprintf("; code objects re-checked by age only (%s): one freed and its address reused within a second can be misnamed", m.NamesByAge)
	}
	if m.PartlyNamed > 0 {
		partly += fmt.Sprintf("; %d named but for frames whose code object was freed before pyobs read it ([code object unreadable])", m.PartlyNamed)
	}
	if m.CountsRaced > 0 {
		partly += fmt.Sprintf("; %d samples counted in the kernel's cache as pyobs read it (a run stalled past the read's wait): each may be missing or counted twice", m.CountsRaced)
	}
	return fmt.Sprintf(" (bpf engine: stacks walked in the kernel at each sample: exact %d (%.2f %% of walks), truncated %d, faulted %d, invalid %d, not Python %d%s, no frames %d%s%s; BPF run time per sample %s, bpf stats %s; observer CPU %s per sample)",
		m.Exact, pct, m.KernelTruncated, m.KernelFaulted, m.KernelInvalid, m.NotPython, mapOnly, m.NoFrames, held, partly, bpf, m.BPFStats, per)
}

// AsyncFooter is record --async's account: how many samples were rooted at
// a task, what could not be, and the observer's CPU per sample.
func AsyncFooter(p *flame.Profile, a *AsyncStats) string {
	m := p.Meta
	pct := 0.0
	if m.Samples > 0 {
		pct = 100 * float64(a.InTask) / float64(m.Samples)
	}
	per := perSample(m)
	s := fmt.Sprintf("pyobs record --async: %d samples rooted at a task (%.1f %%), %d outside any task, %d task changed during the read, %d task unreadable, %d awaiter chain cut, %d with the coroutine off the stack; %d task reads; observer CPU %s per sample",
		a.InTask, pct, a.NoTask, a.Changed, a.Unreadable, a.ChainCut, a.CoroNotOnStack, a.TaskReads, per)
	if a.Note != "" {
		s += "; " + a.Note
	}
	return s
}

// perSample is pyobs's CPU per sample ("n/a" when there was none: a
// stopped or idle target).
func perSample(m flame.Meta) string {
	if m.Samples == 0 {
		return "n/a (no samples)"
	}
	return fmt.Sprintf("%.1f µs", 1e6*m.ObserverCPUS/float64(m.Samples))
}
