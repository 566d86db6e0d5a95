// Package sampler is red's in-kernel stack sampler: one task-clock perf
// event per CPU runs a BPF program (sample.bpf.c) that, for the target's
// threads only (tgid compared in the kernel), walks the running thread's
// Python stack at the sample's instant with internal/bpf/include/pywalk.h
// and sends a hit (time, tid, stack hash, verdict); each distinct stack's
// frames (code object + instruction offset) go once. internal/red joins
// hits to the request the thread was serving.
//
// Truth it reads: the interpreter's own thread states and frame chain, in
// the kernel, at the sample (layouts from internal/pyframes via kwalk).
//
// Price: a perf interrupt per CPU per period (on a VM each one is an exit,
// whatever task runs); for the target's samples a stack walk (a few µs,
// one page read per data-stack chunk) and a 24-byte ring record; user
// space reads both rings on its own schedule (no wake-ups).
//
// Cannot see: threads off CPU (task-clock ticks only while a thread runs:
// a request blocked in sleep, I/O or a lock gets no sample, and red's
// user-space read covers it); native frames; stacks faulted out (page not
// present: counted, never guessed); deeper than 128 frames (truncated,
// counted). x86_64 only.
package sampler
