package offcpu

// BPFStats is the eBPF engine's own account.
type BPFStats struct {
	Attach          string      `json:"attach"`        // tp_btf/sched_switch or raw_tp/sched_switch
	SyscallHints    bool        `json:"syscall_hints"` // syscall number and GIL bit read at switch-out
	SchedSwitches   uint64      `json:"sched_switches"`
	SchedSwitchRate float64     `json:"sched_switch_rate"` // per second, the whole machine: what the program runs on
	TargetOut       uint64      `json:"target_switch_outs"`
	TargetIn        uint64      `json:"target_switch_ins"`
	PythonJoined    uint64      `json:"python_stacks_joined"` // waits keyed under a Python stack read while they lasted
	Drops           BPFDrops    `json:"drops"`
	Maps            []BPFMapUse `json:"maps"`
	SweptThreads    uint64      `json:"swept_threads"`            // exited threads whose entries were folded and deleted
	WakeAttach      string      `json:"waker_attach,omitempty"`   // --waker: tp_btf/sched_waking or raw_tp/sched_waking
	Wakes           uint64      `json:"target_wakings,omitempty"` // --waker: wakings of target threads noted
	WakeJoined      uint64      `json:"waits_joined_to_waker,omitempty"`
	KernelSymbols   string      `json:"kernel_symbols,omitempty"`
	// OnCPUFixed: threads whose on-CPU time from the paired switch events
	// differed from the scheduler's (schedstat) by more than 10 ms; the
	// scheduler's figure is used, OnCPUFixedS is the sum of the corrections.
	OnCPUFixed  uint64  `json:"on_cpu_corrected_threads"`
	OnCPUFixedS float64 `json:"on_cpu_corrected_s"`
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
