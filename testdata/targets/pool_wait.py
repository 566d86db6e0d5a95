"""pool_wait: a multiprocessing Pool(3) whose workers block in known
functions, for the tests of offcpu on a set of processes.

argv: OUT [START_METHOD (fork)] [SECONDS (1.0)] [HOLD (1.5)] [WAIT (stdin | before | none)]

Prints READY (with WAIT before, then waits for a line on stdin: the
observer attached, the workers are forked under its eyes), starts Pool(3)
with START_METHOD, prints "POOL PARENT W1 W2 W3" once its three workers
run, waits for a line on stdin when WAIT is stdin, then takes a multiprocessing Lock and
runs one task per worker (a barrier holds each task until the three have
started): wait_here() sleeps in 10 ms time.sleep calls for SECONDS, then
lock_wait() blocks on the Lock, which the parent holds until HOLD seconds
after the tasks started (each worker then holds it 50 ms: the others wait
on). Its own truth goes to OUT: "WORKER pid sleep_s lock_s" per worker
(the wall time each spent in its sleeps and in the acquire, timed by
itself with time.perf_counter) and "PARENT pid".
"""

import multiprocessing as mp
import os
import sys
import time

barrier = None
lock = None


def init(b, lk):
    global barrier, lock
    barrier, lock = b, lk


def wait_here(seconds):
    slept = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        time.sleep(0.01)
        slept += time.perf_counter() - t
    return slept


def lock_wait():
    t = time.perf_counter()
    lock.acquire()
    return time.perf_counter() - t


def work(seconds):
    barrier.wait()
    slept = wait_here(seconds)
    waited = lock_wait()
    time.sleep(0.05)
    lock.release()
    return os.getpid(), slept, waited


def hello(_):
    time.sleep(0.05)
    return os.getpid()


def main():
    out = sys.argv[1]
    method = sys.argv[2] if len(sys.argv) > 2 else "fork"
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    hold = float(sys.argv[4]) if len(sys.argv) > 4 else 1.5
    wait = sys.argv[5] if len(sys.argv) > 5 else "none"
    print("READY", flush=True)
    if wait == "before":
        sys.stdin.readline()
    ctx = mp.get_context(method)
    lk = ctx.Lock()
    with ctx.Pool(3, initializer=init, initargs=(ctx.Barrier(3), lk)) as pool:
        pool.map(hello, range(6), chunksize=1)
        workers = [p.pid for p in pool._pool]
        print("POOL", os.getpid(), *workers, flush=True)
        if wait == "stdin":
            sys.stdin.readline()
        lk.acquire()
        r = pool.map_async(work, [seconds] * 3, chunksize=1)
        time.sleep(hold)
        lk.release()
        res = r.get()
    with open(out + ".tmp", "w") as f:
        print("PARENT", os.getpid(), file=f)
        for pid, slept, waited in res:
            print("WORKER", pid, "%.6f" % slept, "%.6f" % waited, file=f)
    os.rename(out + ".tmp", out)


if __name__ == "__main__":
    main()
