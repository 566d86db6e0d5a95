"""pool_target: a multiprocessing Pool(3) of CPU-bound workers, for the
tests of record on a set of processes.

argv: OUT [START_METHOD (fork)] [SECONDS (1.0)] [WAIT (stdin | none)]

Prints READY, starts Pool(3) with START_METHOD, prints "POOL PARENT W1 W2
W3" once its three workers run (each prints "HELLO FROM WORKER pid"), waits for a line on stdin when WAIT is
stdin (the observer attached), then runs three tasks at once, one per
worker (a barrier holds each task until the three have started): each
spends SECONDS of its worker's CPU time in burn(). Its own truth goes to
OUT: "WORKER pid cpu_s" per worker (the CPU time the worker spent in
burn, its own time.process_time) and "PARENT pid".
"""

import multiprocessing as mp
import os
import sys
import time

barrier = None


def init(b):
    global barrier
    barrier = b


def burn(seconds):
    barrier.wait()
    t0 = time.process_time()
    x = 0
    while time.process_time() - t0 < seconds:
        for i in range(20000):
            x += i * i
    return os.getpid(), time.process_time() - t0


def hello(_):
    print("HELLO FROM WORKER", os.getpid(), flush=True)
    time.sleep(0.05)
    return os.getpid()


def main():
    out = sys.argv[1]
    method = sys.argv[2] if len(sys.argv) > 2 else "fork"
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    wait = sys.argv[4] if len(sys.argv) > 4 else "none"
    print("READY", flush=True)
    ctx = mp.get_context(method)
    with ctx.Pool(3, initializer=init, initargs=(ctx.Barrier(3),)) as pool:
        pool.map(hello, range(6), chunksize=1)
        workers = [p.pid for p in pool._pool]
        print("POOL", os.getpid(), *workers, flush=True)
        if wait == "stdin":
            sys.stdin.readline()
        res = pool.map(burn, [seconds] * 3, chunksize=1)
    with open(out + ".tmp", "w") as f:
        print("PARENT", os.getpid(), file=f)
        for pid, cpu in res:
            print("WORKER", pid, "%.6f" % cpu, file=f)
    os.rename(out + ".tmp", out)


if __name__ == "__main__":
    main()
