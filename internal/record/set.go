package record

import (
	"fmt"

	"github.com/pyobs/pyobs/internal/flame"

	"github.com/pyobs/pyobs/internal/procset"
)

// SetAccount is a recording's account of the processes it observed (a
// set: several -p, --children, --cgroup, --all, or -- CMD and what it
// forks): each process, and the counts.
type SetAccount struct {
	Processes []ProcessAccount `json:"processes"`
	Counts    SetCounts        `json:"process_counts"`
}

// SetCounts are the set's account in numbers; Unreadable: samples of
// processes that exited before their code objects were read.
type SetCounts struct {
	procset.Counts
	Unreadable uint64 `json:"unreadable_exited"`
}

// ProcessAccount is one member process and its samples.
type ProcessAccount struct {
	procset.Account
	Samples uint64  `json:"samples"`
	CPUS    float64 `json:"cpu_s"` // CPU seconds it used while observed (last reading: for one that exited, its last reading before the exit, a lower bound)
	// Stopped: its threads seen stopped by someone else (absent: never).
	Stopped *flame.Stopped `json:"stopped,omitempty"`
}

// SetFooter is the set's account for stderr: one line of counts, one per
// process.
func SetFooter(a *SetAccount) string {
	extra := ""
	if a.Counts.Unreadable > 0 {
		extra = fmt.Sprintf("%d samples of processes that exited before their code objects were read", a.Counts.Unreadable)
	}
	procs := make([]procset.Account, len(a.Processes))
	for i, p := range a.Processes {
		procs[i] = p.Account
	}
	return procset.Footer("record", a.Counts.Counts, extra, procs, func(i int) string {
		p := a.Processes[i]
		if p.Exited {
			// Read every look, at most 200 ms apart: what it ran after the
			// last one before its exit is sampled, not in this figure.
			return fmt.Sprintf("%d samples, ≥ %.2f CPU s (its last reading before the exit)", p.Samples, p.CPUS)
		}
		return fmt.Sprintf("%d samples, %.2f CPU s", p.Samples, p.CPUS)
	})
}
