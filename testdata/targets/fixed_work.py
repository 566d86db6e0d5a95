"""Benchmark target: a fixed amount of CPU-bound work on a deep stack that
changes fast (recursion 10-40 deep, new depth every few µs). Prints READY,
waits for a line on stdin (so a profiler can attach first), runs the work
and prints its own wall time in seconds."""
import sys
import time

ITER = int(sys.argv[1]) if len(sys.argv) > 1 else 200000


def leaf(n):
    return n * 3 + 1


def down(d, n):
    if d == 0:
        return leaf(n)
    return down(d - 1, n) + 1


def work():
    s = 0
    for i in range(ITER):
        s += down(10 + i % 31, i)
    return s


print("READY", flush=True)
sys.stdin.readline()
t = time.monotonic()
work()
print("%.4f" % (time.monotonic() - t), flush=True)
