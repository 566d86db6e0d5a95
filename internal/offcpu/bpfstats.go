package offcpu

// BPFStats is the eBPF engine's own account.
type BPFStats struct {
	Attach          string      `json:"attach"`        // tp_btf/sched_switch or raw_tp/sched_switch
	SyscallHints    bool        `json:"syscall_hints"` // syscall number and GIL bit read at switch-out
	SchedSwitches   uint64      `json:"sched_switches"`
	SchedSwitchRate float64     `json:"sched_switch_rate"`    // per second of the window, the whole machine: what the program runs on
	TargetOut       uint64      `json:"target_switch_outs"`   // the target's switches (Result.Switches), comparable to SchedSwitches
	TargetIn        uint64      `json:"target_switch_ins"`    // the ends of those switches (and first switch-ins of waits begun before the attach)
	PythonJoined    uint64      `json:"python_stacks_joined"` // waits keyed under a Python stack read while they lasted
	Drops           BPFDrops    `json:"drops"`
	Maps            []BPFMapUse `json:"maps"`
	SweptThreads    uint64      `json:"swept_threads"`            // exited threads whose entries were folded and deleted
	WakeAttach      string      `json:"waker_attach,omitempty"`   // --waker: tp_btf/sched_waking or raw_tp/sched_waking
	Wakes           uint64      `json:"target_wakings,omitempty"` // --waker: wakings of target threads noted
	WakeJoined      uint64      `json:"waits_joined_to_waker,omitempty"`
	KernelSymbols   string      `json:"kernel_symbols,omitempty"`
	// Woken: blocked waits split at their waking (sched_waking); WokenS:
	// their time from the waking to the switch-in, counted as run-queue
	// (runnable, waiting for a CPU), not as the wait's class.
	Woken  uint64  `json:"woken_waits"`
	WokenS float64 `json:"woken_to_run_s"`
	// OnCPUFixed: threads whose on-CPU time from the paired switch events
	// differed from the scheduler's (schedstat) by more than 10 ms; the
	// scheduler's figure is used, OnCPUFixedS is the sum of the corrections.
	OnCPUFixed  uint64  `json:"on_cpu_corrected_threads"`
	OnCPUFixedS float64 `json:"on_cpu_corrected_s"`
	// NotRunS: time inside the threads' on-CPU intervals (switch-in to
	// switch-out) that the scheduler did not count as their run — the
	// hypervisor's steal, interrupt handling — left out of on_cpu_s, so
	// that it agrees with the threads' own CPU time.
	NotRunS float64 `json:"on_cpu_not_running_s"`
	// The programs' own CPU (the kernel's BPF run-time stats; BPFStats
	// says whether they were on): every sched_switch of the machine runs
	// the program, a target's switch-out walks its stacks.
	BPFRuns     uint64  `json:"bpf_runs"`
	BPFCPUS     float64 `json:"bpf_cpu_s"`
	BPFNSPerRun float64 `json:"bpf_ns_per_run"`
	BPFStats    string  `json:"bpf_stats"`
	// KernelWalk: the Python stacks walked at each switch-out, or why not.
	KernelWalk *KernelWalk `json:"python_walk,omitempty"`
	// BeforePython: with -- CMD (held before its exec, observed from its
	// first instruction), the waits that began and ended before its
	// interpreter was up (no Python stack: [before the interpreter]).
	BeforePythonN uint64  `json:"waits_before_python,omitempty"`
	BeforePythonS float64 `json:"waits_before_python_s,omitempty"`
	// HeldS: with -- CMD, how long the command waited before its exec
	// while the program loaded; HeldLayout: where the walk's layout came
	// from (the file read before the exec, or the interpreter once up: a
	// program the verifier checks for every version, the longer load).
	HeldS      float64 `json:"held_s,omitempty"`
	HeldLayout string  `json:"held_layout,omitempty"`
}

// BPFDrops counts what the bounded maps or the stack walker lost.
type BPFDrops struct {
	StartMapFull   uint64  `json:"start_map_full"`   // waits missing from the profile and totals
	WaitsMapFull   uint64  `json:"waits_map_full"`   // waits in the thread totals only
	WaitsMapFullS  float64 `json:"waits_map_full_s"` // their time
	ThreadsMapFull uint64  `json:"threads_map_full"`
	KernelStackErr uint64  `json:"kernel_stack_errors"`
	KernelReused   uint64  `json:"kernel_stacks_reused"` // taken from the thread's previous wait in the same call (no walk)
	Unpaired       uint64  `json:"unpaired_switch_ins"`
	PyidMapFull    uint64  `json:"python_id_map_full"`
	WakesMapFull   uint64  `json:"wakes_map_full,omitempty"`   // --waker: wakings not noted (the wait shows no waker)
	OffwakeMapFull uint64  `json:"offwake_map_full,omitempty"` // --waker: waits joined to a waker but not kept (shown without one)
}

// BPFMapUse is one map's fill at the end of the run.
type BPFMapUse struct {
	Name    string `json:"name"`
	Entries int    `json:"entries"`
	Max     uint32 `json:"max_entries"`
}

// KernelWalk is the account of the Python stacks walked in the kernel at
// each switch-out (the eBPF engine with the kernel walker).
type KernelWalk struct {
	On bool `json:"on"`
	// Why: when off, why the switch-outs' Python stacks are read from user
	// space instead (only waits still in progress at a look get one).
	Why       string `json:"why,omitempty"`
	Walked    uint64 `json:"walked"`           // switch-outs whose whole stack was walked
	Truncated uint64 `json:"truncated"`        // deeper than the walker goes, or callers missing
	Faulted   uint64 `json:"faulted"`          // a page of the stack not present: no stack, counted
	Invalid   uint64 `json:"invalid"`          // a check failed (torn chain)
	NoThread  uint64 `json:"no_thread_state"`  // threads without a Python thread state
	NoFrame   uint64 `json:"no_python_frame"`  // a thread state without a frame
	Distinct  uint64 `json:"distinct_stacks"`  // stacks sent to user space
	RingLost  uint64 `json:"ring_lost"`        // stacks the ring had no room for
	Unnamed   uint64 `json:"waits_unnamed"`    // waits whose stack never reached user space
	SymErrors uint64 `json:"symbolize_errors"` // stacks whose code objects could not be read
}
