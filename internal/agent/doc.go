// Package agent is pyobs's always-on mode: it observes a process in
// rolling windows (15 s by default) — a low-rate CPU profile (19 Hz, the
// record engine's cpu mode), stat's counters and verdicts, and on request
// an off-CPU profile — and hands each finished window to the exporters of
// internal/agent/export (OTLP, Pyroscope, Prometheus), then drops it.
//
// Truth it reads: what the engines it runs read (internal/record: the
// kernel's CPU samples with the Python stack walked at the sample;
// internal/stat: procfs, cgroup cpu.stat, perf counters; internal/offcpu:
// sched_switch; with RED internal/red's socket-syscall tracepoints, one
// engine for the whole run), window after window; /proc/PID/cmdline and the host name
// for the resource attributes.
//
// Price: record's at the agent's rate (19 Hz: a few µs of the target's
// kernel time per sample with the bpf engine; ~0.25 % of one core of
// observer CPU) plus, once per window, the engine's start (the bpf
// engine's verifier load: ~0.15 s of CPU, ~1 % of one core at 15 s
// windows; the perf engine starts in ~10 ms but polls its rings every
// 10 ms, ~1.7 %), stat's counting (~0.3 %), and with OffCPU offcpu's
// (which grows with the target's switch rate), and with RED red's tracing
// (which grows with the request rate). Measured in BENCHMARKS.md.
// Memory is bounded: one window in the making, at most Queue.Len+1 per
// push sink waiting (older ones are dropped and counted), whatever the
// run time.
//
// Cannot see: what record, stat and offcpu cannot (see their doc.go); the
// instants between two windows while the next one starts (a few ms with
// perf, ~0.1 s with bpf: samples there are not taken, and the windows'
// start and end times say so); a window whose sinks were down longer than
// their queue holds (dropped, counted in the exported metrics).
package agent
