// Package fallback decides between an eBPF engine and its fallback, for
// the commands that have both (offcpu: perf context-switch records; trace:
// ptrace): Choose is "eBPF, else the fallback, and say why", Reason puts
// the refusal in a few words, Denied tells a privilege refusal (the caller
// names its gate).
//
// Price: none of its own (it calls the caller's loader once).
// Truth it reads: the loader's error only.
// Cannot see: why a kernel refused beyond the errno and the first line of
// the error; the gate (capabilities, sysctls) is the caller's to name.
package fallback
