package record

import (
	"fmt"
	"strings"

	"github.com/pyobs/pyobs/internal/procset"
)

// SetAccount is a recording's account of the processes it observed (a
// set: several -p, --children, --cgroup, --all, or -- CMD and what it
// forks): each process, and the counts.
type SetAccount struct {
	Processes []ProcessAccount `json:"processes"`
	Counts    SetCounts        `json:"process_counts"`
}

// SetCounts are the set's account in numbers.
type SetCounts struct {
	Seen       int    `json:"seen"`        // processes that were members
	Late       int    `json:"joined_late"` // joined after the start (forked, entered the cgroup)
	Exited     int    `json:"exited"`      // exited while observed
	Refused    int    `json:"refused"`     // members whose stacks were not walked (Refused says why)
	Unreadable uint64 `json:"unreadable_exited"`
	EventsLost uint64 `json:"events_lost"`      // join/exit events the kernel had no room for
	MapFull    uint64 `json:"refused_map_full"` // processes that could not join: the kernel's map was full
}

// ProcessAccount is one member process.
type ProcessAccount struct {
	Pid      int      `json:"pid"`
	Parent   int      `json:"parent,omitempty"`
	How      string   `json:"how"` // seed, fork, cgroup
	Argv     []string `json:"argv,omitempty"`
	JoinedNS uint64   `json:"joined_ns,omitempty"` // CLOCK_MONOTONIC ns; 0 for a seed
	Exited   bool     `json:"exited"`
	Samples  uint64   `json:"samples"`
	CPUS     float64  `json:"cpu_s"` // CPU seconds it used while observed (last reading)
	Python   string   `json:"python,omitempty"`
	Refused  string   `json:"refused,omitempty"` // why its stacks were not walked
}

// SetFooter is the set's account for stderr: one line of counts, one per
// process.
func SetFooter(a *SetAccount) string {
	c := a.Counts
	var b strings.Builder
	fmt.Fprintf(&b, "pyobs record: processes: %d seen, %d joined late, %d exited, %d refused", c.Seen, c.Late, c.Exited, c.Refused)
	if c.Unreadable > 0 {
		fmt.Fprintf(&b, "; %d samples of processes that exited before their code objects were read", c.Unreadable)
	}
	if c.EventsLost > 0 || c.MapFull > 0 {
		fmt.Fprintf(&b, "; %d join/exit events lost, %d processes the kernel's map had no room for", c.EventsLost, c.MapFull)
	}
	for _, p := range a.Processes {
		fmt.Fprintf(&b, "\n  pid %d (%s", p.Pid, p.How)
		if p.Parent != 0 {
			fmt.Fprintf(&b, " by %d", p.Parent)
		}
		if p.Exited {
			b.WriteString(", exited")
		}
		fmt.Fprintf(&b, "): %d samples, %.2f CPU s", p.Samples, p.CPUS)
		if p.Refused != "" {
			b.WriteString("; refused: " + p.Refused)
		}
		if len(p.Argv) > 0 {
			b.WriteString("; " + procset.ShortArgv(p.Argv, 60))
		}
	}
	return b.String()
}
