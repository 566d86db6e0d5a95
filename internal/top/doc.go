// Package top is the live view's engine: it runs the record engine's
// sampler (internal/record: cpu mode takes each sample's Python stack in
// the kernel through internal/kwalk, with the perf fallback; wall and gil
// modes read stacks from user space on a timer) and, once per interval,
// turns what the interval added into a Snapshot: per function its own
// samples (the innermost frame) and total samples (anywhere on the stack,
// counted once per sample under recursion), per thread its share, the
// sampling rate achieved, the observer's CPU and the target's CPU, and how
// long the target was seen stopped by someone else in the interval (the
// record engine's procfs.StopWatch: a stopped target is not sampled).
// Rendering (the terminal screen, JSON lines) is View's and the command's.
//
// Price: the record engine's, at the chosen rate (cpu mode at 99 Hz: a
// few µs per sample in the kernel), plus one pass over the profile's
// unique stacks per interval in the observer (µs to a few ms; it grows with
// the number of distinct stacks, not with time).
//
// Truth read: the kernel's CPU samples (cpu), or the interpreter's thread
// states on a timer (wall, gil); the target's CPU from /proc/PID/stat, read
// by the recorder with its progress (so an interval's CPU and length are
// measured between the same instants, the first from the sampler's start,
// after its load), and for a program started with -- that exited, its
// account from wait4; the observer's own CPU from getrusage.
//
// Cannot see: anything the record engine cannot (see internal/record's
// doc: off-CPU time in cpu mode, native frames, samples lost or read late
// are shown as their markers, not guessed). A function is named by its
// qualified name and file: lines within it are summed. An interval is as
// long as the engine's progress tick lands (1 s ± 0.2 s); rates are per
// the interval's measured length. An attached target that exits and is
// reaped by its parent before the recorder's next reading (every 200 ms):
// its CPU since the last reading is not seen.
package top
