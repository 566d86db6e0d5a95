"""Test target for `pyobs trace --sites`: failing calls from two call
paths through the same innermost function.

Usage: python trace_paths.py [--a N] [--b M] [--out FILE] [--linger S] [--wait-usr1]
Prints READY; with --wait-usr1 waits for SIGUSR1 (sent once the tracer is
attached). Then N calls a() -> io() and M calls b() -> mid() -> io(), each
io() one os.stat of a missing file (ENOENT), interleaved. Writes its own
counts ("a=N b=M") to FILE and prints "DONE a=N b=M elapsed=SECONDS"
(the calls' loop), then lives S seconds more (default 0) before it exits.
"""
import os
import signal
import sys
import time

args = sys.argv[1:]
wait_usr1 = "--wait-usr1" in args
if wait_usr1:
    args.remove("--wait-usr1")
opts = dict(zip(args[::2], args[1::2]))
NA = int(opts.get("--a", "0"))
NB = int(opts.get("--b", "0"))
OUT = opts.get("--out", "")
missing = "/nonexistent/pyobs-trace-paths-%d" % os.getpid()


def io():
    try:
        os.stat(missing)  # PATHS_IO_LINE
    except FileNotFoundError:
        return 1
    return 0


def a():
    return io()  # PATHS_A_LINE


def mid():
    return io()  # PATHS_MID_LINE


def b():
    return mid()  # PATHS_B_LINE


def run(na, nb):
    done_a = done_b = 0
    while done_a < na or done_b < nb:
        if done_a < na:
            done_a += a()  # PATHS_RUN_A_LINE
        if done_b < nb:
            done_b += b()  # PATHS_RUN_B_LINE
    return done_a, done_b


if wait_usr1:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("READY", flush=True)
if wait_usr1:
    signal.sigwait({signal.SIGUSR1})
t0 = time.perf_counter()
ca, cb = run(NA, NB)  # PATHS_MAIN_LINE
elapsed = time.perf_counter() - t0
if OUT:
    with open(OUT, "w") as f:
        f.write("a=%d b=%d\n" % (ca, cb))
print("DONE a=%d b=%d elapsed=%.6f" % (ca, cb, elapsed), flush=True)
time.sleep(float(opts.get("--linger", "0")))
