package offcpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pyobs/pyobs/internal/procset"
)

// ProcessAccount is one member process of an observed set (several -p,
// --children, --cgroup, --all, or -- CMD and what it forks).
type ProcessAccount struct {
	Pid      int      `json:"pid"`
	Parent   int      `json:"parent,omitempty"`
	How      string   `json:"how"` // seed, fork, cgroup
	Argv     []string `json:"argv,omitempty"`
	JoinedNS uint64   `json:"joined_ns,omitempty"` // CLOCK_MONOTONIC ns; 0 for a seed
	Exited   bool     `json:"exited"`
	Threads  int      `json:"threads"`
	OnCPUS   float64  `json:"on_cpu_s"`
	OffCPUS  float64  `json:"off_cpu_s"`
	RunQS    float64  `json:"runqueue_s"`
	Python   string   `json:"python,omitempty"`
	Refused  string   `json:"refused,omitempty"` // why its Python stacks are not named
}

// SetCounts are the set's account in numbers.
type SetCounts struct {
	Seen       int    `json:"seen"`        // processes that were members
	Late       int    `json:"joined_late"` // joined after the start (forked, entered the cgroup)
	Exited     int    `json:"exited"`      // exited while observed
	Refused    int    `json:"refused"`     // members whose Python stacks were not named (Refused says why)
	EventsLost uint64 `json:"events_lost"`
	MapFull    uint64 `json:"refused_map_full"` // processes the kernel's map had no room for
}

// SetFooter is the set's account for stderr: one line of counts, one per
// process; "" for one process observed alone.
func SetFooter(r *Result) string {
	if r == nil || r.ProcessCounts == nil {
		return ""
	}
	c := r.ProcessCounts
	var b strings.Builder
	fmt.Fprintf(&b, "pyobs offcpu: processes: %d seen, %d joined late, %d exited, %d refused", c.Seen, c.Late, c.Exited, c.Refused)
	if c.EventsLost > 0 || c.MapFull > 0 {
		fmt.Fprintf(&b, "; %d join/exit events lost, %d processes the kernel's map had no room for", c.EventsLost, c.MapFull)
	}
	for _, p := range r.Processes {
		fmt.Fprintf(&b, "\n  pid %d (%s", p.Pid, p.How)
		if p.Parent != 0 {
			fmt.Fprintf(&b, " by %d", p.Parent)
		}
		if p.Exited {
			b.WriteString(", exited")
		}
		fmt.Fprintf(&b, "): %d threads, %.3fs off CPU, %.3fs on CPU, %.3fs run-queue", p.Threads, p.OffCPUS, p.OnCPUS, p.RunQS)
		if p.Refused != "" {
			b.WriteString("; refused: " + p.Refused)
		}
		if len(p.Argv) > 0 {
			b.WriteString("; " + procset.ShortArgv(p.Argv, 60))
		}
	}
	return b.String()
}

// sumProcesses adds each thread's times to its process's line.
func sumProcesses(procs []ProcessAccount, threads []ThreadStat) {
	at := map[int]int{}
	for i, p := range procs {
		at[p.Pid] = i
	}
	for _, t := range threads {
		if i, ok := at[t.Pid]; ok && t.Pid != 0 {
			p := &procs[i]
			p.Threads++
			p.OnCPUS += t.OnCPUS
			p.OffCPUS += t.OffCPUS
			p.RunQS += t.RunQS
		}
	}
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].Pid < procs[j].Pid })
}
