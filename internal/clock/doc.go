// Package clock holds the observer's two clocks: CLOCK_MONOTONIC, the
// clock perf events and eBPF programs stamp their records with, and the
// observer's own CPU time, which every engine reports as its perturbation.
//
// Price: one clock_gettime or getrusage call per reading (a vDSO call for
// the monotonic clock), nothing else.
// Truth it reads: the kernel's clocks. Cannot see: anything of the target.
package clock
