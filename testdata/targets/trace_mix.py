"""Test target for `pyobs trace`: a fixed mix of calls, part of it from
threads started while it is traced.

Usage: python trace_mix.py [--writes N] [--stats N] [--sleeps M] [--nap S]
                           [--threads T] [--thread-stats K] [--wait-usr1]
Prints READY; with --wait-usr1 waits for SIGUSR1 (the test sends it once
the tracer is attached; one blocking call, nothing that polls). Then: N
1-byte os.write calls to /dev/null (in writes) and "ELAPSED seconds" of
that loop; N failing os.stat calls (in stats); M time.sleep(S) calls (in
nap, S 0.05 by default); T threads started now, each making K failing
os.stat calls (in worker), joined. Last "DONE writes=W stats=S sleeps=M
thread_stats=K2 threads=T" with its own counts.
"""
import os
import signal
import sys
import threading
import time

args = sys.argv[1:]
wait_usr1 = "--wait-usr1" in args
if wait_usr1:
    args.remove("--wait-usr1")
opts = dict(zip(args[::2], args[1::2]))
N = int(opts.get("--writes", "0"))
S = int(opts.get("--stats", "0"))
T = int(opts.get("--threads", "0"))
K = int(opts.get("--thread-stats", "0"))
M = int(opts.get("--sleeps", "0"))
NAP = float(opts.get("--nap", "0.05"))
missing = "/nonexistent/pyobs-trace-mix-%d" % os.getpid()
fd = os.open("/dev/null", os.O_WRONLY)


def writes(n):
    done = 0
    for _ in range(n):
        done += os.write(fd, b"x")  # WRITE_LINE
    return done


def stats(n):
    failed = 0
    for _ in range(n):
        try:
            os.stat(missing)  # MIX_STAT_LINE
        except FileNotFoundError:
            failed += 1
    return failed


def nap(m):
    for _ in range(m):
        time.sleep(NAP)  # MIX_SLEEP_LINE
    return m


thread_failed = []


def worker(k):
    failed = 0
    for _ in range(k):
        try:
            os.stat(missing)  # THREAD_STAT_LINE
        except FileNotFoundError:
            failed += 1
    thread_failed.append(failed)


if wait_usr1:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("READY", flush=True)
if wait_usr1:
    signal.sigwait({signal.SIGUSR1})
t0 = time.perf_counter()
w = writes(N)
print("ELAPSED %.6f" % (time.perf_counter() - t0), flush=True)  # of the write loop
s = stats(S)
m = nap(M)
ts = [threading.Thread(target=worker, args=(K,)) for _ in range(T)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("DONE writes=%d stats=%d sleeps=%d thread_stats=%d threads=%d" % (w, s, m, sum(thread_failed), len(thread_failed)), flush=True)
