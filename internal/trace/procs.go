package trace

import (
	"fmt"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

// ProcessJSON is one process of a traced set: who it is (procset's
// account) and its own calls (counted in the kernel, all syscalls or the
// -e ones).
type ProcessJSON struct {
	procset.Account
	Execs int `json:"execs,omitempty"`
	// Stopped: this process's threads seen stopped by someone else (the
	// set's watch); absent when none was.
	Stopped *procfs.Stops `json:"stopped,omitempty"`
	CallStats
}

// ProcessAccount is the set's account: processes seen, joined late,
// exited, refused (could not join: the kernel's map of members was full),
// and join/exit events the kernel could not send.
type ProcessAccount struct {
	Seen       int    `json:"seen"`
	JoinedLate int    `json:"joined_late"`
	Exited     int    `json:"exited"`
	Refused    uint64 `json:"refused"`
	RefusedWhy string `json:"refused_why,omitempty"`
	EventsLost uint64 `json:"events_lost"`
	// CallsDropped: calls missing from their process's line (the kernel's
	// per-process map full); the syscall table still has them.
	CallsDropped uint64 `json:"calls_dropped"`
}

// processes joins the set's members with their kernel accounts.
func processes(set *procset.Set, per map[int]tracepoint.PidStat, dropped uint64, stops map[int]*procfs.Stops) ([]ProcessJSON, *ProcessAccount) {
	var out []ProcessJSON
	members := set.Members()
	argv := map[int][]string{}
	for _, m := range members {
		argv[m.Pid] = m.Argv
	}
	for _, m := range members {
		if len(m.Argv) == 0 && m.How == procset.Fork && m.Execs == 0 {
			// Gone before its command line was read, and it never exec'd:
			// it ran its parent's program.
			m.Argv = argv[m.Parent]
		}
		p := ProcessJSON{Account: procset.AccountOf(m), Execs: m.Execs, Stopped: stops[m.Pid]}
		if k, ok := per[m.Pid]; ok {
			h := Hist{Counts: map[int]uint64{}, N: 0, Max: uint64(k.Max)}
			for b, n := range k.Hist {
				h.Counts[b] += n
				h.N += n
			}
			p.CallStats = callStats(k.Calls, k.Errors, k.Total, &h)
		}
		out = append(out, p)
	}
	st := set.Stats()
	a := &ProcessAccount{Seen: st.Seen, JoinedLate: st.Late, Exited: st.Exited, Refused: st.Full, EventsLost: st.Lost, CallsDropped: dropped}
	if st.Full > 0 {
		a.RefusedWhy = "the kernel's map of members (8192 processes) was full"
	}
	return out, a
}

// argvShort is a process's command line for its line: at most 60
// characters, "?" when it has none.
func argvShort(argv []string) string {
	if s := procset.ShortArgv(argv, 60); s != "" {
		return s
	}
	return "?"
}

// processText is the per-process table of a set (text format). Its lines
// start with the process frame ([pid N]), not a number: a reader of the
// syscall table above (rows start with %wall) does not take them for rows.
func processText(ps []ProcessJSON, a *ProcessAccount) string {
	var b strings.Builder
	fmt.Fprintf(&b, "per process:\n%-14s %9s %8s %10s %9s %9s %9s  %s\n", "process", "calls", "errors", "total", "p50", "p99", "max", "command")
	var calls, errs uint64
	var total float64
	for _, p := range ps {
		calls += p.Calls
		errs += p.Errors
		total += p.TotalS
		how := ""
		switch {
		case p.How == string(procset.Fork):
			how = fmt.Sprintf(" (forked by %d)", p.Parent)
		case p.How == string(procset.Cgroup):
			how = " (joined in the cgroup)"
		}
		end := ""
		if p.Exited {
			end = ", exited"
		}
		fmt.Fprintf(&b, "%-14s %9d %8d %10s %9s %9s %9s  %s%s%s\n", fmt.Sprintf("[pid %d]", p.Pid), p.Calls, p.Errors, fmtUS(p.TotalS*1e6),
			fmtUS(p.P50US), fmtUS(p.P99US), fmtUS(p.MaxUS), argvShort(p.Argv), how, end)
	}
	fmt.Fprintf(&b, "%-14s %9d %8d %10s\n", "all processes", calls, errs, fmtUS(total*1e6))
	fmt.Fprintf(&b, "processes: %s\n", a.words())
	return b.String()
}

func (a *ProcessAccount) words() string {
	s := fmt.Sprintf("%d seen, %d joined late, %d exited, %d refused", a.Seen, a.JoinedLate, a.Exited, a.Refused)
	if a.RefusedWhy != "" {
		s += " (" + a.RefusedWhy + ")"
	}
	if a.EventsLost > 0 {
		s += fmt.Sprintf(", %d join/exit events lost", a.EventsLost)
	}
	if a.CallsDropped > 0 {
		s += fmt.Sprintf(", %d calls missing from their process's line (map full)", a.CallsDropped)
	}
	return s
}

// live reports whether a member of the set may still run: one whose exit
// the kernel has not reported and that /proc still shows alive.
func (b *bpfRun) live() bool {
	fs := b.run.sess.FS
	for _, m := range b.tp.Set.Members() {
		if m.Exited {
			continue
		}
		if p, err := fs.Process(m.Pid); err == nil && p.State != "Z" && p.State != "X" {
			return true
		}
	}
	return false
}
