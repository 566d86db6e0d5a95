package perfevent

import "golang.org/x/sys/unix"

// Event names one countable event.
type Event struct {
	Name   string
	Type   uint32
	Config uint64
}

// Known events, by perf's names.
var (
	TaskClock       = Event{"task-clock", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK}
	ContextSwitches = Event{"context-switches", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES}
	CPUMigrations   = Event{"cpu-migrations", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS}
	PageFaults      = Event{"page-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS}
	Cycles          = Event{"cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES}
	Instructions    = Event{"instructions", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS}
	CacheRefs       = Event{"cache-references", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES}
	CacheMisses     = Event{"cache-misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES}
	Branches        = Event{"branches", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS}
	BranchMisses    = Event{"branch-misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_MISSES}
)

// DefaultGroups is what `pyobs stat` counts: software events in one group,
// and hardware events in pairs, so each ratio (IPC, cache and branch miss
// rates) comes from one group — the same time slices.
var DefaultGroups = [][]Event{
	{TaskClock, ContextSwitches, CPUMigrations, PageFaults},
	{Cycles, Instructions},
	{CacheRefs, CacheMisses},
	{Branches, BranchMisses},
}
