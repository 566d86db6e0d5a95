"""Short lock waits, timed by the target itself.

A holder thread keeps a lock ~50 us at a time (asleep, so the GIL is
free), saying so through an event, and after letting go keeps the GIL
~10 us (running), so that a woken waiter waits for the GIL too. Once the
file argv[2] exists, the main thread, argv[1] times in waiter_fn, waits
for the holder to hold the lock and then takes it — blocking until the
holder lets go. It times each acquire (wall and thread CPU time) and
writes {"off_s", "wall_s", "waits", "line"} to argv[3]: its own account
of the time it spent off CPU in lock.acquire() (blocked on the lock,
then on the GIL, or waiting for a CPU) — what pyobs offcpu must find
under waiter_fn at that line — and exits.
"""
import json
import os
import sys
import threading
import time

N, GO, OUT = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
done = threading.Event()


held = threading.Event()


def holder():
    while not done.is_set():
        with lock:
            held.set()
            time.sleep(0.00005)
        end = time.perf_counter_ns() + 10000
        while time.perf_counter_ns() < end:  # the GIL held: the woken waiter waits for it
            pass
        time.sleep(0.00002)


def waiter_fn(n):
    off, wall, waits = 0, 0, 0
    for _ in range(n):
        held.wait()
        held.clear()
        c, t = time.thread_time_ns(), time.perf_counter_ns()
        lock.acquire()  # the blocked line
        d, dc = time.perf_counter_ns() - t, time.thread_time_ns() - c
        lock.release()
        wall += d
        off += max(d - dc, 0)
        waits += d > 10000
    return off / 1e9, wall / 1e9, waits


threading.Thread(target=holder, daemon=True).start()
print("READY", flush=True)
while not os.path.exists(GO):
    time.sleep(0.01)
off, wall, w = waiter_fn(N)
line = next(i for i, l in enumerate(open(__file__), 1) if "# the blocked line" in l and "lock.acquire()" in l)
with open(OUT + ".tmp", "w") as f:
    json.dump({"off_s": off, "wall_s": wall, "waits": w, "line": line}, f)
os.rename(OUT + ".tmp", OUT)
done.set()
sys.exit(0)
