// Package agent is pyobs's always-on mode: it observes a process (or a
// set of them: children, several pids, a cgroup — the CPU profile's
// stacks rooted at their process, stat's counters summed over the set) in
// rolling windows (15 s by default) — a low-rate CPU profile (19 Hz, the
// record engine's cpu mode), stat's counters and verdicts, and on request
// an off-CPU profile and red's metrics — and hands each finished window to
// the exporters of internal/agent/export (OTLP over HTTP or gRPC,
// Pyroscope, Prometheus), then drops it.
//
// Truth it reads: what the engines it runs read (internal/record: the
// kernel's CPU samples with the Python stack walked and counted at the
// sample; internal/stat: procfs, cgroup cpu.stat, perf counters;
// internal/offcpu: sched_switch; with RED internal/red's socket-syscall
// tracepoints, one engine for the whole run); /proc/PID/cmdline and the
// host name for the resource attributes.
//
// Engines are started rarely: one CPU recording spans 20 windows and is
// cut into windows as it grows (cpu.go: each window is what the recording
// gained since the last cut); one off-CPU run spans OffWindow (20 windows
// by default) and is exported with its own span (off.go); red runs for
// the whole run.
//
// Price: the bpf engine's start (the verifier's load, ~0.15 s of CPU) once
// per segment; record at 19 Hz with a look a second (the kernel counts
// samples by stack: user space pays per distinct stack); stat's counting,
// thread states polled three times a window; with OffCPU offcpu's (a look
// every 500 ms; its BPF program runs at every context switch of the
// machine), and with RED red's tracing (grows with the request rate).
// Measured (BENCHMARKS.md): 0.43 % of one core on a busy target without
// OffCPU, 1.2 % with it, over 60 s; the hour's soak in BENCHMARKS.md.
// Memory is bounded: one window in the making, a segment's distinct
// stacks, at most Queue.Len+1 windows per push sink waiting (older ones
// are dropped and counted), whatever the run time.
//
// Cannot see: what record, stat and offcpu cannot (see their doc.go); up
// to one look (≤ 1 s) of samples counted in the kernel at a cut, which go
// to the next window; the instants while a segment's recording restarts
// (~0.1 s every 20 windows: the windows' times say what they cover); a
// window whose sinks were down longer than their queue holds (dropped,
// counted in the exported metrics).
package agent
