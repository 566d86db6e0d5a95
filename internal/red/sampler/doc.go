// Package sampler is red's in-kernel stack sampler: one task-clock perf
// event per CPU runs a BPF program (sample.bpf.c) that, for the observed
// processes' threads only (the set's members, procset.h, in a map shared
// with red.bpf.c), walks the running thread's
// Python stack at the sample's instant with internal/bpf/include/pywalk.h
// and sends a hit (time, tid, stack hash, verdict); each distinct stack's
// frames (code object + instruction offset) go once. A thread off CPU gets
// no tick: a raw_tp/sched_switch program walks each of the target's
// threads as it is switched out and, at its switch-in, sends the wait
// (start, duration, the stack it blocked in) when it lasted half a sample
// period or more. internal/red joins hits to the request the thread was
// serving: a request has ticks for its CPU time and waits for the rest.
//
// Truth it reads: the interpreter's own thread states and frame chain, in
// the kernel, at the sample (layouts from internal/pyframes via kwalk).
//
// Price: a perf interrupt per CPU per period (on a VM each one is an exit,
// whatever task runs); for the target's ticks and for each switch-out of
// its threads a stack walk (a few µs, one page read per data-stack chunk);
// a 32-byte ring record per tick and per wait of half a period; every
// context switch of the machine pays a map lookup of each task's tgid.
// User space reads both rings on its own schedule (no wake-ups).
//
// Cannot see: where a thread waits inside a wait (the stack is the one it
// blocked in, for the whole wait); waits shorter than half a period, and
// waits begun before the attach; native frames; stacks faulted out (page not
// present: counted, never guessed); deeper than 128 frames (truncated,
// counted); a member that exec'd a new program (walked with the target's
// layout: forked workers only). x86_64 only.
package sampler
