package top

// Help is the top command's long help.
const Help = `top samples like record (cpu mode: each sample's Python stack taken in the
kernel at the sample; wall and gil modes as record's) and redraws every
second: functions by own % (innermost frame) and total % (anywhere on the
stack, once per sample) of the last interval's samples, over all threads or
per thread, with their seconds since the start; the threads' shares,
samples/s, the observer's CPU and the target's CPU. A target stopped by
someone else (SIGSTOP, job control, a tracer) runs nothing and is not
sampled: a line says so, with how long it was stopped in the interval.

Keys: o sort by own, t by total, n by name, h rows per thread, p pause the
display (sampling goes on), q quit (a program started with -- is ended with
the view). On a pipe (or with --format json): one JSON object per line per
interval, and a last one marked "final" (docs/json.md).`
