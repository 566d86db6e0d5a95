// Package perfevent counts kernel and PMU events for a process through
// perf_event_open(2).
//
// Counting: events are opened as groups (a leader and its members are
// scheduled onto the PMU together), one group per thread of the target
// with inherit set, so threads the target creates later are counted too.
// Each read returns time_enabled and time_running next to the values: when
// the PMU had more events than counters, the kernel multiplexes and a value
// is an estimate (value × enabled/running) — the scaling is reported, never
// hidden. Events the machine lacks (a VM without a virtual PMU has no
// cycles or instructions) are "not supported": a value, not an error.
// Software events (task-clock, context-switches, cpu-migrations,
// page-faults) are kernel bookkeeping and work everywhere perf does.
//
// Price: counting is nearly free (a counter saved and restored on each
// context switch of the target); each group costs a file descriptor per
// event per thread.
// Cannot see: where the events happen (no stacks; that is sampling), or a
// thread's events before the counters were opened.
package perfevent
