package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
	"github.com/pyobs/pyobs/internal/session"
)

type offcpuFlags struct {
	duration time.Duration
	minBlock time.Duration
	wall     bool
	threads  bool
	icicle   bool
	engine   string
	mapSize  uint32
	exclude  []string
	waker    bool
}

var offcpuFormats = []string{"text", "svg", "folded", "pprof", "speedscope", "gecko", "json"}

func newOffcpu(g *globals) *cobra.Command {
	var f offcpuFlags
	c := &cobra.Command{
		Use:   "offcpu (-p PID | -- CMD ARGS)",
		Short: "Where threads wait: blocked time (µs) by Python stack, with the reason (tracing context switches)",
		Long: `offcpu measures every off-CPU interval of every thread of the target and
weights the Python stack it was blocked in by how long it was blocked
(microseconds), with the wait class: lock (futex under a Python lock), GIL
(futex on the interpreter's GIL), sleep, pipe/read, network/poll, disk I/O,
other; run-queue (preempted: runnable but not running) is reported apart.

Engines (--engine auto|bpf|perf; auto: bpf, else perf, saying why on
stderr). Both time every interval with the kernel's clock and read a
thread's Python stack while it is off CPU (every ~1 ms; it cannot change
then); a wait that began and ended between two looks has no Python stack
and is folded under [short waits: not read], never guessed.
  bpf: an eBPF program on sched_switch (tp_btf, else raw_tp; needs CAP_BPF
    and CAP_PERFMON or root) takes each wait's kernel stack, state and
    syscall at the switch-out and sums the intervals in the kernel: short
    waits too get their kernel stack and class, and the profile shows kernel
    frames (SYMBOL_[k]) under the Python ones. User stacks: only the
    innermost native frame (CPython here has no frame pointers).
  perf: perf_event_open context-switch records per thread; the class of a
    wait comes from procfs while it lasts, so short waits have none (run-
    queue excepted) and there are no kernel frames.
--waker (bpf engine only; refused with --engine perf, and no fallback):
a second program on sched_waking notes who woke each target thread, and
each wait it ended is folded with its waker after the class: the blocked
stack, [lock], then "[woken by] NAME (TID, this process)" for a thread of
the target (its thread name), "[woken by] COMM (TID, pid PID)" for another
process, "(0: an interrupt on an idle CPU)" for the idle task, then the
waker's kernel frames — which thread's lock release, which pipe write or
timer interrupt ended the wait. Waits nobody woke in the window (still
blocked at the end, preempted) have no waker.

--exclude REGEXP (repeatable) leaves out of the profile every stack with a
frame whose label matches (the folded label: "func (file:line)", kernel
frames "SYMBOL_[k]", classes "[lock]"): for legitimate idle waits such as
an event loop's epoll_wait or a pool's idle workers. How much was left out
is reported; the per-thread and class totals still include it.

--wall also folds each thread's on-CPU time under [on-CPU] (no stack: use
pyobs record for that), so per thread on-CPU + off-CPU + run-queue = window.

Output: a text summary on stdout by default (per thread on-CPU / off-CPU /
run-queue, top blocked stacks, class totals); with -o the format follows the
file name (svg, folded, pprof, speedscope, gecko, json) unless --format says.
Price: per context switch of the target a few map updates and a kernel
stack walk (bpf; the walk is skipped when a thread blocks again in the same
syscall on the same fd or futex within 10 ms, reusing its last stack) or
one ring write (perf), plus one Python stack read per wait longer than
~1 ms; the bpf program also runs (a compare) on every switch of the machine. The footer reports the switch rates, drops or lost
records and pyobs's own CPU. The target is never stopped.`,
		Example: `  pyobs offcpu -p 4242 -d 10s -o wait.svg
  pyobs offcpu -p 4242 --format folded --min-block 1ms
  pyobs offcpu -p 4242 --wall --threads -o all.svg
  pyobs offcpu -p 4242 --engine perf          # no eBPF: context-switch records
  pyobs offcpu -p 4242 --waker -o wake.svg    # and who woke each wait
  pyobs offcpu -p 4242 --exclude '_worker \(.*concurrent/futures/thread.py' --exclude 'BaseSelectorEventLoop.select' 
  pyobs offcpu -- python3 job.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runOffcpu(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to watch (default: until Ctrl-C or the target exits)")
	fl.DurationVar(&f.minBlock, "min-block", 0, "leave waits shorter than this out of the profile (still in the totals)")
	fl.BoolVar(&f.wall, "wall", false, "also fold on-CPU time per thread under [on-CPU]")
	fl.BoolVar(&f.threads, "threads", false, "root each stack at its thread (name and TID)")
	fl.BoolVar(&f.icicle, "icicle", false, "svg: draw roots at the top")
	fl.StringVar(&f.engine, "engine", "auto", "auto (bpf, else perf), bpf or perf")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "leave out stacks with a frame whose label matches this regexp (repeatable); the amount left out is reported")
	fl.BoolVar(&f.waker, "waker", false, "bpf engine: fold each wait with the thread that woke it ([woken by] and its kernel stack)")
	fl.Uint32Var(&f.mapSize, "bpf-map-entries", 0, "size of the bpf engine's hash maps (tests of its bounds)")
	_ = fl.MarkHidden("bpf-map-entries")
	return c
}

func runOffcpu(cmd *cobra.Command, g *globals, f *offcpuFlags, args []string) error {
	format := g.format
	if format == "" {
		format = "text"
		if g.output != "" && g.output != "-" {
			format = formatFromName(g.output)
		}
	}
	ok := false
	for _, x := range offcpuFormats {
		ok = ok || x == format
	}
	if !ok {
		return usagef("offcpu: unknown --format %q (%s)", format, strings.Join(offcpuFormats, ", "))
	}
	if format == "pprof" && (g.output == "" || g.output == "-") {
		return usagef("offcpu: pprof output is binary: give -o FILE")
	}
	if f.duration < 0 || f.minBlock < 0 {
		return usagef("offcpu: --duration and --min-block must not be negative")
	}
	var excl []*regexp.Regexp
	for _, e := range f.exclude {
		re, err := regexp.Compile(e)
		if err != nil {
			return usagef("offcpu: --exclude %q: %v", e, err)
		}
		excl = append(excl, re)
	}
	switch f.engine {
	case "auto", offcpu.EngineBPF, offcpu.EnginePerf:
	default:
		return usagef("offcpu: unknown --engine %q (auto, bpf, perf)", f.engine)
	}
	if f.waker && f.engine == offcpu.EnginePerf {
		return usagef("offcpu: --waker needs the bpf engine (sched_waking): not with --engine perf")
	}
	s, err := target(cmd, g, args)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if s.Spawned() {
		if err := s.WaitPython(ctx, 0); err != nil {
			s.Kill(2 * time.Second)
			return err
		}
	}
	res, err := runOffcpuEngine(cmd, s, f)
	if err != nil && res == nil {
		return err
	}
	if len(excl) > 0 {
		res.Excluded = excludeStacks(res.Profile, excl, f.exclude)
	}
	var werr error
	switch format {
	case "text", "json", "svg":
		werr = writeOutput(g.output, 0o644, func(w io.Writer) error {
			switch format {
			case "text":
				return writeOffcpuText(w, res)
			case "json":
				return writeOffcpuJSON(w, res)
			}
			what := "off CPU"
			if f.wall {
				what = "on + off CPU"
			}
			return flame.WriteSVG(w, res.Profile, flame.SVGOptions{Title: fmt.Sprintf("pyobs offcpu: pid %d, µs %s", res.Profile.Meta.Pid, what), Icicle: f.icicle})
		})
	default:
		werr = writeProfile(g.output, format, res.Profile, f.icicle)
	}
	if werr != nil {
		return werr
	}
	fmt.Fprintln(cmd.ErrOrStderr(), offcpuFooter(res, g.output))
	if err != nil {
		return err
	}
	if s.Spawned() {
		return waitSpawned(ctx, s)
	}
	return nil
}

// runOffcpuEngine runs the engine asked for; auto falls back from bpf to
// perf when the program can't be loaded, in one stderr line with the reason
// and the gate.
func runOffcpuEngine(cmd *cobra.Command, s *session.Session, f *offcpuFlags) (*offcpu.Result, error) {
	opt := offcpu.Options{Duration: f.duration, MinBlock: f.minBlock, Wall: f.wall, Threads: f.threads, MapEntries: f.mapSize, Waker: f.waker}
	ctx := cmd.Context()
	if f.engine == offcpu.EnginePerf {
		return offcpu.Run(ctx, s, opt)
	}
	res, err := offcpu.RunBPF(ctx, s, opt)
	if err == nil || res != nil || !errors.Is(err, schedbpf.ErrUnavailable) {
		return res, err
	}
	gate := schedbpf.Gate()
	if f.engine == offcpu.EngineBPF || f.waker { // no waker without eBPF: no fallback
		what := "offcpu --engine bpf"
		if f.waker {
			what = "offcpu --waker (needs the eBPF engine)"
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, &capability.GateError{Op: fmt.Sprintf("load the offcpu eBPF program for pid %d", s.Pid), Gate: gate,
				Fix: "run as root, grant CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep on pyobs), or use --engine perf",
				Err: errors.Join(capability.ErrPermission, err)}
		}
		return nil, fmt.Errorf("%s: %w (%s)", what, err, gate)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "pyobs offcpu: eBPF engine unavailable (%s; %s): using the perf engine\n", bpfReason(err), gate)
	return offcpu.Run(ctx, s, opt)
}

// bpfReason is the load error in a few words: the errno where the kernel
// refused, else its first line.
func bpfReason(err error) string {
	for _, e := range []error{unix.EPERM, unix.EACCES, unix.ENOMEM, unix.EINVAL, unix.ENOENT} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	r, _, _ := strings.Cut(err.Error(), "\n")
	if len(r) > 200 {
		r = r[:200] + "…"
	}
	return r
}

// excludeStacks removes the stacks with a frame matching one of res.
func excludeStacks(p *flame.Profile, res []*regexp.Regexp, patterns []string) *offcpu.Excluded {
	match := make([]int8, p.NumFrames()) // per frame: 0 unknown, 1 yes, -1 no
	us, n := p.Remove(func(s *flame.Stack) bool {
		for _, id := range s.Frames {
			if match[id] == 0 {
				match[id] = -1
				l := p.Frame(id).Label()
				for _, re := range res {
					if re.MatchString(l) {
						match[id] = 1
						break
					}
				}
			}
			if match[id] == 1 {
				return true
			}
		}
		return false
	})
	return &offcpu.Excluded{Patterns: patterns, US: us, Stacks: n}
}

type offcpuTop struct {
	Stack   string  `json:"stack"`
	Class   string  `json:"class"`
	Waker   string  `json:"waker,omitempty"` // --waker: who ended these waits (the [woken by] frame)
	US      int64   `json:"us"`
	Percent float64 `json:"percent"` // of all blocked (non-run-queue) time in the profile
}

// topBlocked lists the profile's heaviest waiting stacks (not [on-CPU]).
func topBlocked(p *flame.Profile, n int) []offcpuTop {
	var out []offcpuTop
	var total int64
	for _, s := range p.Stacks() {
		if len(s.Frames) == 0 {
			continue
		}
		// With --waker the class frame is followed by the waker's.
		end, waker := len(s.Frames)-1, ""
		for i, id := range s.Frames {
			if f := p.Frame(id); f.Kind == flame.State && strings.HasPrefix(f.Function, offcpu.WokenBy) && i > 0 {
				end, waker = i-1, strings.TrimPrefix(f.Function, offcpu.WokenBy)
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
		if !strings.HasPrefix(class, offcpu.ClassRunQueue) {
			total += s.Weight
		}
		out = append(out, offcpuTop{Stack: p.FoldedKey(s), Class: class, Waker: waker, US: s.Weight})
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

func writeOffcpuJSON(w io.Writer, r *offcpu.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema int            `json:"schema"`
		Engine string         `json:"engine"`
		Meta   flame.Meta     `json:"meta"`
		Result *offcpu.Result `json:"result"`
		Top    []offcpuTop    `json:"top"`
	}{1, engineName(r), r.Profile.Meta, r, topBlocked(r.Profile, 50)})
}

// engineName is the JSON's engine: perf-switch or bpf-sched-switch.
func engineName(r *offcpu.Result) string {
	if r.Engine == offcpu.EngineBPF {
		return "bpf-sched-switch"
	}
	return "perf-switch"
}

func writeOffcpuText(w io.Writer, r *offcpu.Result) error {
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
	if x := r.Excluded; x != nil {
		fmt.Fprintf(w, "\nLeft out by --exclude %s: %.3fs in %d stacks (still in the totals above)\n", strings.Join(x.Patterns, ", "), float64(x.US)/1e6, x.Stacks)
	}
	fmt.Fprintf(w, "\nTop blocked stacks (%% of blocked time in the profile; innermost frame last):\n")
	for _, t := range topBlocked(r.Profile, 10) {
		st, woke := t.Stack, ""
		if t.Waker != "" {
			st, _, _ = strings.Cut(st, ";"+offcpu.WokenBy)
			woke = "  ← woken by " + t.Waker
		}
		fmt.Fprintf(w, "  %5.1f %%  %-20s %9.3fs  %s%s\n", t.Percent, t.Class, float64(t.US)/1e6, shortStack(st), woke)
	}
	fmt.Fprintf(w, "\nWait classes (all threads):\n")
	for _, c := range offcpu.Classes {
		if v := r.ClassS[c]; v >= 0.0005 {
			fmt.Fprintf(w, "  %-13s %9.3fs\n", c, v)
		}
	}
	if r.ShortS > 0 {
		if r.Engine == offcpu.EngineBPF {
			fmt.Fprintf(w, "  %-13s %9.3fs  (%d waits shorter than a look: no Python stack; kernel stack and class from the kernel, included above)\n", "not read", r.ShortS, r.ShortN)
		} else {
			fmt.Fprintf(w, "  %-13s %9.3fs  (%d waits shorter than a drain, class unknown unless preempted)\n", "not read", r.ShortS, r.ShortN)
		}
	}
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

func engineWords(r *offcpu.Result) string {
	if r.Engine == offcpu.EngineBPF && r.BPF != nil {
		return "eBPF " + r.BPF.Attach
	}
	return "perf context-switch"
}

func offcpuFooter(r *offcpu.Result, out string) string {
	where := "stdout"
	if out != "" && out != "-" {
		where = out
	}
	rate := 0.0
	if r.WindowS > 0 {
		rate = float64(r.Switches) / r.WindowS
	}
	obs := ""
	if r.WindowS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*r.ObserverCPUS/r.WindowS)
	}
	if b := r.BPF; r.Engine == offcpu.EngineBPF && b != nil {
		d := b.Drops
		wake := ""
		if b.WakeAttach != "" {
			wake = fmt.Sprintf("waker (%s): %d wakings, %d waits joined to their waker, drops: wakes map %d, offwake map %d; ",
				b.WakeAttach, b.Wakes, b.WakeJoined, d.WakesMapFull, d.OffwakeMapFull)
		}
		if b.OnCPUFixed > 0 {
			wake += fmt.Sprintf("on-CPU time of %d threads taken from the scheduler's schedstat (switch events were off by %+.3fs); ", b.OnCPUFixed, b.OnCPUFixedS)
		}
		return fmt.Sprintf("pyobs offcpu: eBPF engine (%s, syscall hints %v), %d threads, %d switches in %.1fs (%.0f/s), "+
			"machine sched_switch rate %.0f/s; drops: start map %d, waits map %d (%.3fs, in the totals), threads map %d, kernel stack ids %d, unpaired %d; kernel stacks reused %d; "+
			"%d stack reads (%d discarded: the thread ran during the read), %d waits joined to a Python stack; short waits not read: %d, %.3fs; "+
			"below --min-block: %d, %.3fs; exited threads swept %d; %sobserver CPU %.2fs%s; target stopped 0s; wrote %s",
			b.Attach, b.SyscallHints, len(r.Threads), r.Switches, r.WindowS, rate, b.SchedSwitchRate,
			d.StartMapFull, d.WaitsMapFull, d.WaitsMapFullS, d.ThreadsMapFull, d.KernelStackErr, d.Unpaired, d.KernelReused,
			r.Looks, r.LookRetries, b.PythonJoined, r.ShortN, r.ShortS, r.FilteredN, r.FilteredS, b.SweptThreads, wake, r.ObserverCPUS, obs, where)
	}
	return fmt.Sprintf("pyobs offcpu: perf context-switch engine, %d threads, %d switches in %.1fs (%.0f/s), lost %d; "+
		"%d stack reads (%d discarded: the thread ran during the read); short waits not read: %d, %.3fs (%d of them ≥ 2 drain periods); "+
		"below --min-block: %d, %.3fs; observer CPU %.2fs%s; target stopped 0s; wrote %s",
		len(r.Threads), r.Switches, r.WindowS, rate, r.Lost, r.Looks, r.LookRetries, r.ShortN, r.ShortS, r.ShortLongN,
		r.FilteredN, r.FilteredS, r.ObserverCPUS, obs, where)
}
