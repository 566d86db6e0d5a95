// Package trace aggregates syscall events into a summary: per syscall
// counts, errors by errno name, a log-linear latency histogram (p50, p99,
// max), share of wall time, and the Python call sites of the calls whose
// site was read. It is pure: engines feed it Calls, renderers read Summary.
//
// Sites are read only for some calls (slow or failing ones: reading a
// Python stack per call would cost more than the call); every call without
// a site is counted as unattributed, never guessed.
//
// Two ways in: Add takes one finished call at a time (the ptrace engine);
// AddKernel takes a syscall's account already aggregated in the kernel
// (counts, total, min/max and the histogram's buckets — the tracepoint
// engine computes the same buckets in BPF) and AddSite the outcome of each
// site read. A site read after the call had returned (the tracepoint
// engine's fallback for threads the kernel could not read) is counted as
// late and never attributed, as record counts its late reads.
package trace
