package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/session"
)

// Slowdown classes, as the JSON's slowdown_class says them.
const (
	PtraceSlowdown     = "ptrace: 2 stops per call"
	SeccompSlowdown    = "ptrace+seccomp: 2 stops per traced call, none for the rest"
	TracepointSlowdown = "tracepoint: in-kernel aggregation, no stops"
)

// BlockedCall is a call still blocked when the trace ended, with the site
// read while it blocked (exact: the call had not returned after the read).
type BlockedCall struct {
	Tid   int     `json:"tid"`
	Name  string  `json:"name"`
	ForUS float64 `json:"for_us"`
	*Site
}

// KernelDrops: what the tracepoint engine's bounded maps could not hold.
type KernelDrops struct {
	Events uint64 `json:"events"`    // slow/failing calls without an event (ring buffer full): no site read
	Hist   uint64 `json:"histogram"` // calls missing from their histogram (p50/p99 from the rest)
	Errnos uint64 `json:"errnos"`    // errors missing from their errno count
	Enters uint64 `json:"enters"`    // enters not recorded: those calls are not counted
}

// summary is `pyobs trace --format json` (DESIGN.md); the text table reads it too.
type summary struct {
	Schema          int           `json:"schema"`
	Pid             int           `json:"pid"`
	Engine          string        `json:"engine"`
	EngineNote      string        `json:"engine_note,omitempty"`
	DurationS       float64       `json:"duration_s"`
	Events          uint64        `json:"events"`
	Lost            uint64        `json:"lost"`
	ObserverCPUS    float64       `json:"observer_cpu_s"`
	TargetStoppedS  float64       `json:"target_stopped_s"`
	Stopped         *procfs.Stops `json:"stopped,omitempty"` // stopped by someone else
	Slowdown        string        `json:"slowdown_class"`
	Threads         int           `json:"threads"`
	Signals         uint64        `json:"signals_passed"`
	SlowUS          float64       `json:"slow_us"`
	SiteReads       uint64        `json:"site_reads"`
	SiteReadsFailed uint64        `json:"site_reads_failed"`
	SiteReadError   string        `json:"site_read_error,omitempty"`
	SiteReadsKernel uint64        `json:"site_reads_in_kernel"`
	SiteReadsLate   uint64        `json:"site_reads_late"`
	KernelDrops     *KernelDrops  `json:"kernel_drops,omitempty"`
	InProgress      int           `json:"in_progress_at_end,omitempty"`
	Blocked         []BlockedCall `json:"in_progress,omitempty"`
	TargetExited    bool          `json:"target_exited"`
	TargetExeced    string        `json:"target_execed,omitempty"`
	Restarted       uint64        `json:"restarted_calls"`
	// ptrace -e -- CMD: processes CMD started, under its filter, passed
	// through (their calls not traced).
	ChildrenPassed int        `json:"children_passed_through,omitempty"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	PythonWalk     *StackWalk `json:"python_walk,omitempty"`
	BPF            *BPFRun    `json:"bpf,omitempty"`
	// A held command: the programs' load and attach before it ran.
	AttachS float64 `json:"attach_s,omitempty"`
	// A set: each process's line and the set's account.
	Processes      []ProcessJSON   `json:"processes,omitempty"`
	ProcessAccount *ProcessAccount `json:"process_account,omitempty"`
	Syscalls       []SyscallJSON   `json:"syscalls"`
}

func (r *Result) summary() *summary {
	a := &r.Account
	s := &summary{
		Schema: 1, Pid: a.Pid, Engine: a.Engine, EngineNote: a.Note, DurationS: a.Wall.Seconds(),
		Events: a.Calls, Lost: a.Lost, ObserverCPUS: a.ObserverCPU.Seconds(), TargetStoppedS: a.Stopped.Seconds(),
		Slowdown: a.Slowdown, Threads: a.Threads, Signals: a.Signals, SlowUS: float64(a.Slow) / 1e3,
		SiteReads: a.SiteReads, SiteReadsFailed: a.SiteReadsFailed, SiteReadError: a.SiteReadError,
		SiteReadsKernel: a.SiteReadsKernel, SiteReadsLate: a.SiteReadsLate, KernelDrops: a.Drops,
		InProgress: a.InProgress, Blocked: r.Blocked, TargetExited: a.TargetExited, Restarted: a.Restarted, ChildrenPassed: a.Children,
		PythonWalk: a.Walk, BPF: a.BPF, Syscalls: r.Syscalls,
		AttachS: a.Attach.Seconds(), Processes: r.Processes, ProcessAccount: a.Procs, Stopped: a.StoppedBy,
	}
	if xe := execedAs(a.Execed); xe != nil {
		s.TargetExeced = xe.Now()
	}
	if a.Set && s.Processes == nil {
		s.Processes = []ProcessJSON{}
	}
	if (a.Spawned || a.Held) && a.TargetExited && a.ExitCode >= 0 {
		code := a.ExitCode
		s.ExitCode = &code
	}
	return s
}

// WriteJSON writes the result as `--format json`.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.summary())
}

func fmtUS(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.1fµs", us)
}

// WriteText writes the result as the text table; afterLog: --log lines
// came first (a blank line separates them).
func WriteText(w io.Writer, r *Result, afterLog bool) error {
	s := r.summary()
	bw := bufio.NewWriter(w)
	if afterLog {
		fmt.Fprintln(bw)
	}
	who := fmt.Sprintf("pid %d", s.Pid)
	if s.ProcessAccount != nil {
		who = fmt.Sprintf("%d processes from pid %d", s.ProcessAccount.Seen, s.Pid)
		if s.ProcessAccount.Seen == 1 {
			who = fmt.Sprintf("1 process, pid %d", s.Pid)
		}
	}
	fmt.Fprintf(bw, "pyobs trace: %s, %.2fs, engine %s (%s), %s\n", who, s.DurationS, s.Engine, s.Slowdown, callsWords(s))
	if s.Stopped != nil {
		fmt.Fprintf(bw, "stopped: %s: a stopped thread makes no calls\n", s.Stopped.Phrase(s.DurationS))
	}
	fmt.Fprintf(bw, "%6s %9s %8s %10s %9s %9s %9s  %-18s %s\n", "%wall", "calls", "errors", "total", "p50", "p99", "max", "syscall", "errnos / top Python sites")
	for _, r := range s.Syscalls {
		var errs []string
		for k, v := range r.Errnos {
			errs = append(errs, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(errs)
		fmt.Fprintf(bw, "%6.1f %9d %8d %10s %9s %9s %9s  %-18s %s\n", r.PctWall, r.Calls, r.Errors, fmtUS(r.TotalS*1e6),
			fmtUS(r.P50US), fmtUS(r.P99US), fmtUS(r.MaxUS), r.Name, strings.Join(errs, ", "))
		// Every call of a row with lines is on one: listed, cut by
		// --sites, late, unattributed, or neither slow nor failing.
		listed, cut, what := len(r.TopSites), r.SitesNotListed, "sites"
		if len(r.TopPaths) > 0 || r.PathsNotListed > 0 {
			// Whole paths (their leaves are the sites): the paths' calls
			// and the sites' are the same calls.
			listed, cut, what = len(r.TopPaths), r.PathsNotListed, "paths"
			for _, p := range r.TopPaths {
				fmt.Fprintf(bw, "%73s %d× %s\n", "", p.Calls, pathText(p))
			}
		} else {
			for _, site := range r.TopSites {
				fmt.Fprintf(bw, "%73s %d× %s (%s:%d)\n", "", site.Calls, site.Function, site.File, site.Line)
			}
		}
		if cut > 0 {
			fmt.Fprintf(bw, "%73s %d× at other %s (not listed: --sites %d)\n", "", cut, what, listed)
		}
		if what == "paths" && r.SiteOnly > 0 {
			fmt.Fprintf(bw, "%73s %d× named by their innermost frame only (no path: in top_sites)\n", "", r.SiteOnly)
		}
		if r.LateReads > 0 {
			fmt.Fprintf(bw, "%73s %d× [late read] (stack read after the call returned: not attributed)\n", "", r.LateReads)
		}
		// Unattributed calls get a line beside others, or alone when their
		// reasons are known (every call of the row went unnamed).
		if lines := listed > 0 || cut > 0 || r.LateReads > 0 || len(r.UnattributedWhy) > 0; lines && r.Unattributed > r.LateReads {
			fmt.Fprintf(bw, "%73s %d× unattributed (slow or failing, no site found%s)\n", "", r.Unattributed-r.LateReads, whyList(r.UnattributedWhy))
		}
		if (listed > 0 || cut > 0 || r.Unattributed > 0) && r.NotSlowOrFailing > 0 {
			fmt.Fprintf(bw, "%73s %d× neither slow nor failing (no site read: by design)\n", "", r.NotSlowOrFailing)
		}
	}
	if s.Threads > 1 && len(s.Syscalls) > 0 {
		fmt.Fprintf(bw, "%%wall: time in the call over the %.2fs window, summed over the %d threads (so up to %d00 %%)\n", s.DurationS, s.Threads, s.Threads)
	}
	for _, b := range s.Blocked {
		fmt.Fprintf(bw, "in progress at the end: tid %d in %s for %s at %s (%s:%d)\n", b.Tid, b.Name, fmtUS(b.ForUS), b.Function, b.File, b.Line)
	}
	if s.ProcessAccount != nil {
		bw.WriteString(processText(s.Processes, s.ProcessAccount))
	}
	return bw.Flush()
}

// pathShown: a path of more frames shows its root, the count of frames
// left out, and its innermost pathTail frames.
const (
	pathShown = 6
	pathTail  = 4
)

// pathText is a call path root → leaf on one line; a deep one loses its
// middle (its root and the frames nearest the call stay), a truncated one
// starts with [truncated].
func pathText(p PathCount) string {
	label := func(f Site) string { return fmt.Sprintf("%s (%s:%d)", f.Function, shortFile(f.File), f.Line) }
	n := len(p.Frames)
	var parts []string
	if p.Truncated {
		parts = append(parts, "[truncated]")
	}
	for i := n - 1; i >= 0; i-- {
		if n > pathShown && i < n-1 && i >= pathTail {
			if i == n-2 {
				parts = append(parts, fmt.Sprintf("… %d frames …", n-1-pathTail))
			}
			continue
		}
		parts = append(parts, label(p.Frames[i]))
	}
	return strings.Join(parts, " → ")
}

// shortFile is a path's last two elements (a site's file as the table
// shows it; the JSON keeps the whole path).
func shortFile(f string) string {
	i := strings.LastIndexByte(f, '/')
	if i <= 0 {
		return f
	}
	if j := strings.LastIndexByte(f[:i], '/'); j >= 0 {
		return f[j+1:]
	}
	return f
}

// callsWords is the header's count of calls: the table's total, and when
// the engine saw more syscall exits than the table counts, why (calls the
// kernel restarted, calls outside -e that a stop still showed).
func callsWords(s *summary) string {
	var table uint64
	for _, r := range s.Syscalls {
		table += r.Calls
	}
	if s.Events <= table {
		return fmt.Sprintf("%d calls", table)
	}
	var why []string
	restarted := min(s.Restarted, s.Events-table)
	if restarted > 0 {
		why = append(why, fmt.Sprintf("%d interrupted and restarted by the kernel", restarted))
	}
	if other := s.Events - table - restarted; other > 0 {
		why = append(why, fmt.Sprintf("%d outside -e", other))
	}
	return fmt.Sprintf("%d calls (of %d syscall exits seen; not counted: %s)", table, s.Events, strings.Join(why, ", "))
}

// Footer is the account's line for stderr; where names the output.
func (r *Result) Footer(where string) string {
	a := &r.Account
	note := ""
	if a.Note != "" {
		note = " " + a.Note
	}
	obs := ""
	if a.Wall > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*a.ObserverCPU.Seconds()/a.Wall.Seconds())
	}
	slow := fmtUS(float64(a.Slow) / 1e3)
	if s := a.StoppedBy; s != nil {
		how := "the tracer's own account of its group stops"
		if s.LookMS > 0 {
			how = fmt.Sprintf("seen at looks every %d ms", s.LookMS)
		}
		note += fmt.Sprintf("; %s (%s): a stopped thread makes no calls", s.Phrase(a.Wall.Seconds()), how)
	}
	if a.Engine == "tracepoint" {
		end := "programs detached"
		if a.TargetExited {
			end = "target exited"
		}
		if xe := execedAs(a.Execed); xe != nil {
			end = fmt.Sprintf("the target exec'd (now %s): the trace ended there, its counts up to the moment the exec was seen (polled every 20 ms), no site named from the new program", xe.Now())
		}
		d := a.Drops
		found, py := "found by walking the interpreter's thread list", ""
		if w := a.Walk; w != nil && w.On {
			found = "found by the kernel in the interpreter's thread list or their TLS"
			py = fmt.Sprintf("; Python stacks walked whole in the kernel at the call: %d whole, %d truncated, %d faulted, %d invalid, %d without a thread state, %d without a frame; %d distinct stacks, %d lost (ring full), %d calls unnamed, %d stacks with unreadable code objects",
				w.Walked, w.Truncated, w.Faulted, w.Invalid, w.NoThread, w.NoFrame, w.Distinct, w.RingLost, w.Unnamed, w.SymErrors)
			if w.HeldLayout != "" {
				py += fmt.Sprintf("; the walk's layout %s, %d calls before the interpreter was up (not named)", w.HeldLayout, w.BeforeWalk)
			}
		} else if w != nil && (a.Set || a.Held || w.NotPython) {
			py = fmt.Sprintf("; no Python sites (%s)", w.Why)
		} else if w != nil {
			py = fmt.Sprintf("; innermost Python frame only (no stack walk: %s)", w.Why)
		}
		if a.Procs != nil {
			py += "; processes: " + a.Procs.words()
		}
		if a.Held {
			py += fmt.Sprintf("; the command was held before its exec for %.3fs while the programs loaded and attached (not part of its run)", a.Attach.Seconds())
		}
		if b := a.BPF; b != nil {
			py += fmt.Sprintf("; BPF run time: sys_enter %.3fs over %d runs, sys_exit %.3fs over %d runs (every syscall of the machine; stats %s)",
				b.EnterS, b.EnterRuns, b.ExitS, b.ExitRuns, b.Stats)
		}
		return fmt.Sprintf("pyobs trace: engine tracepoint%s; %d calls counted in the kernel; %d events of slow or failing calls read (lost %d: ring buffer full); kernel map drops: histogram %d, errno %d, enters %d; %d threads; %d interrupted calls restarted by the kernel (not counted); %d calls in progress at the end (not counted); sites for %d calls: %d read in the kernel at the call (%d of new threads %s), %d late reads (after the call returned: not attributed), %d found none (slow ≥ %s or failing%s)%s; observer CPU %.2fs%s; pyobs stopped the target 0s — %s (ptrace: 2 stops per call); %s; wrote %s",
			note, a.Calls, a.Events, d.Events, d.Hist, d.Errnos, d.Enters, a.Threads, a.Restarted, a.InProgress,
			a.SiteReads, a.SiteReadsKernel, a.SiteReadsWalked, found, a.SiteReadsLate, a.SiteReadsFailed, slow, firstFailed(a), py, a.ObserverCPU.Seconds(), obs, TracepointSlowdown, end, where)
	}
	end := "detached from every thread"
	switch {
	case a.TargetExited && a.StillAttached != nil:
		end = fmt.Sprintf("target exited; pyobs stays attached, counting nothing, to what it started that still runs under its filter (%s) until that ends (a seccomp filter cannot be removed)", nProcs(a.ChildrenLeft))
	case a.TargetExited:
		end = "target exited"
	case a.StillAttached != nil:
		end = "still attached, counting nothing, until the command ends (a seccomp filter cannot be removed)"
	}
	return fmt.Sprintf("pyobs trace: engine ptrace%s; %d events, lost 0; %d threads, %d signals passed through, %d interrupted calls restarted by the kernel (not counted); %d calls in progress at the end (not counted); whole Python stacks read at the exit stop for %d calls (%d found none; slow ≥ %s or failing); observer CPU %.2fs%s; pyobs's ptrace stops held the target ≥ %.3fs (from each stop's report to its resume, summed over threads; the switches into and out of each stop, 2 per call, come on top, not measured); %s%s; %s; wrote %s",
		note, a.Calls, a.Threads, a.Signals, a.Restarted, a.InProgress, a.SiteReads, a.SiteReadsFailed, slow, a.ObserverCPU.Seconds(), obs, a.Stopped.Seconds(), a.Slowdown, kidsWords(a), end, where)
}

// kidsWords is "; N processes …" when the command's -e filter bound
// processes it started, passed through untraced.
func kidsWords(a *Account) string {
	if a.Children == 0 {
		return ""
	}
	return fmt.Sprintf("; %s the command started ran under its -e filter: passed through, their calls not traced (--engine tracepoint traces them)", nProcs(a.Children))
}

func nProcs(n int) string {
	if n == 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", n)
}

func execedAs(err error) *session.ExecedError {
	var xe *session.ExecedError
	if errors.As(err, &xe) {
		return xe
	}
	return nil
}

// firstFailed is "; the first: WHY" when a site read failed for a reason
// it knows (a code object freed as the target exited, a torn chain …).
func firstFailed(a *Account) string {
	if a.SiteReadsFailed == 0 || a.SiteReadError == "" {
		return ""
	}
	return "; the first: " + a.SiteReadError
}

// whyList is ": N reason, M reason" for the unattributed calls' reasons,
// most calls first ("" when none is known).
func whyList(why map[string]uint64) string {
	if len(why) == 0 {
		return ""
	}
	keys := make([]string, 0, len(why))
	for k := range why {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if why[keys[i]] != why[keys[j]] {
			return why[keys[i]] > why[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", why[k], k)
	}
	return ": " + strings.Join(parts, ", ")
}
