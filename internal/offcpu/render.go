package offcpu

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procset"
)

// TopStack is one of the heaviest waiting stacks of a profile.
type TopStack struct {
	Stack   string  `json:"stack"`
	Class   string  `json:"class"`
	Waker   string  `json:"waker,omitempty"` // --waker: who ended these waits (the [woken by] frame)
	US      int64   `json:"us"`
	Percent float64 `json:"percent"` // of all off-CPU time in the profile: blocked and run-queue
}

// OffCPUHeading names the whole TopStack.Percent is a share of.
const OffCPUHeading = "% of off-CPU time in the profile, blocked and run-queue"

// TopBlocked lists the profile's heaviest waiting stacks (not [on-CPU]),
// each with its share of all off-CPU time in the profile (run-queue
// included: the rows are of one whole and add up to at most 100 %).
func TopBlocked(p *flame.Profile, n int) []TopStack {
	var out []TopStack
	var total int64
	for _, s := range p.Stacks() {
		if len(s.Frames) == 0 {
			continue
		}
		// With --waker the class frame is followed by the waker's.
		end, waker := len(s.Frames)-1, ""
		for i, id := range s.Frames {
			if f := p.Frame(id); f.Kind == flame.State && strings.HasPrefix(f.Function, WokenBy) && i > 0 {
				end, waker = i-1, strings.TrimPrefix(f.Function, WokenBy)
				break
			}
		}
		leaf := p.Frame(s.Frames[end]).Function
		if leaf == "[on-CPU]" {
			continue
		}
		class := strings.Trim(leaf, "[]")
		if leaf == "[short waits: not read]" {
			class = "not read"
		} else if class != "not read" {
			for _, id := range s.Frames[:end] {
				if p.Frame(id).Function == "[short waits: not read]" {
					class += " (not read)"
					break
				}
			}
		}
		total += s.Weight
		out = append(out, TopStack{Stack: p.FoldedKey(s), Class: class, Waker: waker, US: s.Weight})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].US > out[j].US })
	for i := range out {
		out[i].Percent = 100 * float64(out[i].US) / float64(max(total, 1))
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// WriteJSON writes the run as one JSON document: the profile's meta, the
// account and the 50 heaviest waiting stacks.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema int        `json:"schema"`
		Engine string     `json:"engine"`
		Meta   flame.Meta `json:"meta"`
		Result *Result    `json:"result"`
		Top    []TopStack `json:"top"`
	}{1, engineName(r), r.Profile.Meta, r, TopBlocked(r.Profile, 50)})
}

// engineName is the JSON's engine: perf-switch or bpf-sched-switch.
func engineName(r *Result) string {
	if r.Engine == EngineBPF {
		return "bpf-sched-switch"
	}
	return "perf-switch"
}

// WriteText writes the run's summary: per thread on-CPU, off-CPU and
// run-queue time, the top blocked stacks and the class totals.
func WriteText(w io.Writer, r *Result) error {
	m := r.Profile.Meta
	fmt.Fprintf(w, "pyobs offcpu: pid %d, Python %s, window %.2fs (%s engine)\n\n", m.Pid, m.Python, r.WindowS, engineWords(r))
	fmt.Fprintf(w, "%-28s %9s %9s %9s %9s  %s\n", "THREAD", "ON-CPU", "OFF-CPU", "RUN-QUEUE", "WINDOW", "SHORT WAITS (not read)")
	for _, t := range r.Threads {
		name := fmt.Sprintf("%d", t.Tid)
		if t.Name != "" {
			name = fmt.Sprintf("%s (%d)", t.Name, t.Tid)
		}
		if t.Exited {
			name += " exited"
		}
		fmt.Fprintf(w, "%-28s %8.3fs %8.3fs %8.3fs %8.3fs  %d, %.3fs\n", name, t.OnCPUS, t.OffCPUS, t.RunQS, t.WindowS, t.ShortN, t.ShortS)
	}
	if len(r.Processes) > 0 {
		fmt.Fprintf(w, "\n%-28s %9s %9s %9s %7s  %s\n", "PROCESS", "ON-CPU", "OFF-CPU", "RUN-QUEUE", "THREADS", "HOW")
		for _, p := range r.Processes {
			how := p.How
			if p.Parent != 0 {
				how += fmt.Sprintf(" by %d", p.Parent)
			}
			if p.Exited {
				how += ", exited"
			}
			if p.Refused != "" {
				how += "; refused: " + p.Refused
			}
			fmt.Fprintf(w, "%-28s %8.3fs %8.3fs %8.3fs %7d  %s\n", procset.Label(p.Pid, nil), p.OnCPUS, p.OffCPUS, p.RunQS, p.Threads, how)
		}
	}
	if x := r.Excluded; x != nil {
		fmt.Fprintf(w, "\nLeft out by --exclude %s: %.3fs in %d stacks (still in the totals above)\n", strings.Join(x.Patterns, ", "), float64(x.US)/1e6, x.Stacks)
	}
	fmt.Fprintf(w, "\nTop blocked stacks (%s; innermost frame last):\n", OffCPUHeading)
	for _, t := range TopBlocked(r.Profile, 10) {
		st, woke := t.Stack, ""
		if t.Waker != "" {
			st, _, _ = strings.Cut(st, ";"+WokenBy)
			woke = "  ← woken by " + t.Waker
		}
		fmt.Fprintf(w, "  %5.1f %%  %-20s %9.3fs  %s%s\n", t.Percent, t.Class, float64(t.US)/1e6, shortStack(st), woke)
	}
	fmt.Fprintf(w, "\nWait classes (all threads):\n")
	for _, c := range Classes {
		if v := r.ClassS[c]; v >= 0.0005 {
			fmt.Fprintf(w, "  %-13s %9.3fs\n", c, v)
		}
	}
	if r.ShortS > 0 {
		if r.Engine == EngineBPF {
			fmt.Fprintf(w, "  %-13s %9.3fs  (%d waits shorter than a look: no Python stack; kernel stack and class from the kernel, included above)\n", "not read", r.ShortS, r.ShortN)
		} else {
			fmt.Fprintf(w, "  %-13s %9.3fs  (%d waits shorter than a drain, class unknown unless preempted)\n", "not read", r.ShortS, r.ShortN)
		}
	}
	writeGreenletText(w, r)
	return nil
}

// shortStack keeps what a line can show: the innermost two frames above
// the kernel, the innermost two kernel frames, the class.
func shortStack(st string) string {
	fr := strings.Split(st, ";")
	if len(fr) <= 4 {
		return st
	}
	var user, kern []string
	for _, f := range fr[:len(fr)-1] {
		if strings.HasSuffix(f, "_[k]") {
			kern = append(kern, f)
		} else {
			user = append(user, f)
		}
	}
	var out []string
	if len(user) > 2 {
		out = append(out, "…")
		user = user[len(user)-2:]
	}
	out = append(out, user...)
	if len(kern) > 2 {
		out = append(out, "…")
		kern = kern[len(kern)-2:]
	}
	out = append(append(out, kern...), fr[len(fr)-1])
	return strings.Join(out, ";")
}

func engineWords(r *Result) string {
	if r.Engine == EngineBPF && r.BPF != nil {
		return "eBPF " + r.BPF.Attach
	}
	return "perf context-switch"
}

// Footer is the run's one-line account for stderr (where: the output's
// name).
func Footer(r *Result, where string) string {
	if r.Execed != "" {
		where += fmt.Sprintf("; the target exec'd (now %s): the window ended at the exec, nothing of the new program counted or named", r.Execed)
	}
	rate := 0.0
	if r.WindowS > 0 {
		rate = float64(r.Switches) / r.WindowS
	}
	obs := ""
	if r.WindowS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*r.ObserverCPUS/r.WindowS)
	}
	if b := r.BPF; r.Engine == EngineBPF && b != nil {
		d := b.Drops
		wake := ""
		if b.WakeAttach != "" {
			wake = fmt.Sprintf("waker (%s): %d wakings, %d waits joined to their waker, drops: wakes map %d, offwake map %d; ",
				b.WakeAttach, b.Wakes, b.WakeJoined, d.WakesMapFull, d.OffwakeMapFull)
		}
		if b.NotRunS >= 0.0005 {
			wake += fmt.Sprintf("%.3fs inside on-CPU intervals the threads did not run (hypervisor steal, interrupts: not on-CPU time); ", b.NotRunS)
		}
		if b.OnCPUFixed > 0 {
			wake += fmt.Sprintf("on-CPU time of %d threads taken from the scheduler's schedstat (switch events were off by %+.3fs); ", b.OnCPUFixed, b.OnCPUFixedS)
		}
		py := fmt.Sprintf("%d stack reads (%d discarded: the thread ran during the read), %d waits joined to a Python stack", r.Looks, r.LookRetries, b.PythonJoined)
		if k := b.KernelWalk; k != nil && k.On {
			py = fmt.Sprintf("Python stacks walked in the kernel at the switch-out: %d whole, %d truncated, %d faulted, %d invalid, %d threads without a thread state, %d without a frame "+
				"(%d distinct, ring lost %d, waits unnamed %d, symbolize errors %d); %d stack reads for the rest",
				k.Walked, k.Truncated, k.Faulted, k.Invalid, k.NoThread, k.NoFrame, k.Distinct, k.RingLost, k.Unnamed, k.SymErrors, r.Looks)
		} else if k != nil && k.Why != "" {
			py += " (Python stacks read from user space: " + k.Why + ")"
		}
		py += fmt.Sprintf("; %d blocked waits ended by a waking: %.3fs from the waking to the CPU counted as run-queue", b.Woken, b.WokenS)
		if b.BeforePythonN > 0 {
			py += fmt.Sprintf("; observed from the command's first instruction: %d waits, %.3fs, before its interpreter was up ([before the interpreter])", b.BeforePythonN, b.BeforePythonS)
		}
		if b.HeldS > 0 {
			py += fmt.Sprintf("; the command waited %.2fs before its exec while the program loaded", b.HeldS)
			if b.HeldLayout != "" {
				py += ", the walk's layout " + b.HeldLayout
			}
		}
		if b.BPFRuns > 0 {
			py += fmt.Sprintf("; BPF %.3fs of CPU (%.0f ns per run, %d runs)", b.BPFCPUS, b.BPFNSPerRun, b.BPFRuns)
		}
		return fmt.Sprintf("pyobs offcpu: eBPF engine (%s, syscall hints %v), %d threads, %d switches (switch-outs) in %.1fs (%.0f/s), "+
			"machine sched_switch rate %.0f/s (%d switches in the same window); drops: start map %d, waits map %d (%.3fs, in the totals), threads map %d, kernel stack ids %d, unpaired %d; kernel stacks reused %d; "+
			"%s; short waits not read: %d, %.3fs; "+
			"below --min-block: %d, %.3fs; exited threads swept %d; %sobserver CPU %.2fs%s; pyobs stopped the target 0s; wrote %s",
			b.Attach, b.SyscallHints, len(r.Threads), r.Switches, r.WindowS, rate, b.SchedSwitchRate, b.SchedSwitches,
			d.StartMapFull, d.WaitsMapFull, d.WaitsMapFullS, d.ThreadsMapFull, d.KernelStackErr, d.Unpaired, d.KernelReused,
			py, r.ShortN, r.ShortS, r.FilteredN, r.FilteredS, b.SweptThreads, wake, r.ObserverCPUS, obs, where)
	}
	return fmt.Sprintf("pyobs offcpu: perf context-switch engine, %d threads, %d switches (switch-outs) in %.1fs (%.0f/s), lost %d; "+
		"%d stack reads (%d discarded: the thread ran during the read); short waits not read: %d, %.3fs (%d of them ≥ 2 drain periods); "+
		"below --min-block: %d, %.3fs; observer CPU %.2fs%s; pyobs stopped the target 0s; wrote %s",
		len(r.Threads), r.Switches, r.WindowS, rate, r.Lost, r.Looks, r.LookRetries, r.ShortN, r.ShortS, r.ShortLongN,
		r.FilteredN, r.FilteredS, r.ObserverCPUS, obs, where)
}

// Write renders a result in a format: the text report, the JSON document,
// the SVG titled with what the weights are, or any other profile format.
func Write(w io.Writer, format string, r *Result, wall, icicle bool) error {
	switch format {
	case "text":
		return WriteText(w, r)
	case "json":
		return WriteJSON(w, r)
	case "svg":
		what := "off CPU"
		if wall {
			what = "on + off CPU"
		}
		return flame.WriteSVG(w, r.Profile, flame.SVGOptions{Title: fmt.Sprintf("pyobs offcpu: pid %d, µs %s", r.Profile.Meta.Pid, what), Icicle: icicle})
	}
	return flame.Write(w, format, r.Profile, flame.WriteOptions{})
}
