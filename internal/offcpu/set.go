package offcpu

import (
	"fmt"
	"sort"

	"github.com/pyobs/pyobs/internal/procset"
)

// ProcessAccount is one member process of an observed set (several -p,
// --children, --cgroup, --all, or -- CMD and what it forks) and its time.
type ProcessAccount struct {
	procset.Account
	Threads int     `json:"threads"`
	OnCPUS  float64 `json:"on_cpu_s"`
	OffCPUS float64 `json:"off_cpu_s"`
	RunQS   float64 `json:"runqueue_s"`
}

// SetCounts are the set's account in numbers.
type SetCounts = procset.Counts

// SetFooter is the set's account for stderr: one line of counts, one per
// process; "" for one process observed alone.
func SetFooter(r *Result) string {
	if r == nil || r.ProcessCounts == nil {
		return ""
	}
	procs := make([]procset.Account, len(r.Processes))
	for i, p := range r.Processes {
		procs[i] = p.Account
	}
	return procset.Footer("offcpu", *r.ProcessCounts, "", procs, func(i int) string {
		p := r.Processes[i]
		return fmt.Sprintf("%d threads, %.3fs off CPU, %.3fs on CPU, %.3fs run-queue", p.Threads, p.OffCPUS, p.OnCPUS, p.RunQS)
	})
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
