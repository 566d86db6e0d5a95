"""Test target for `pyobs trace`: failing stats and sleeps from known lines.

Usage: python trace_stat.py [--stats N] [--sleeps M] [--nap S] [--delay S] [--exit CODE]
Prints READY, sleeps --delay seconds (time to attach), then makes
N os.stat calls on a missing path (all from the line in do_stats) and M
time.sleep(S) calls (from nap), prints "DONE stats=N sleeps=M eintr=E" and
exits with CODE.
"""
import os
import sys
import time

args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
N = int(opts.get("--stats", "0"))
M = int(opts.get("--sleeps", "0"))
S = float(opts.get("--nap", "0.05"))
missing = "/nonexistent/pyobs-trace-%d" % os.getpid()


def do_stats(n):
    count = 0
    for _ in range(n):
        try:
            os.stat(missing)  # STAT_LINE
        except FileNotFoundError:
            count += 1
    return count


def nap(m):
    for _ in range(m):
        time.sleep(S)  # SLEEP_LINE
    return m


print("READY", flush=True)
time.sleep(float(opts.get("--delay", "0")))
stats = do_stats(N)
sleeps = nap(M)
print("DONE stats=%d sleeps=%d" % (stats, sleeps), flush=True)
sys.exit(int(opts.get("--exit", "0")))
