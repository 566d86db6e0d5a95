"""Test target: many short-lived threads, each of which names itself.

Usage: python thread_names.py SECONDS
Prints READY, then for SECONDS starts threads a few at a time: each renames
itself req-<its own native id> first thing and burns ~20 ms of its CPU time
(time.thread_time). A long-lived thread named spin-a burns 5 ms of CPU every
10 ms meanwhile. glibc gives a finished thread's pthread_t (its
threading ident) to the next one it starts, so idents recur; native ids do
not. At the end it prints one line per thread, from the threads' own
records: "thread TID LIFE_MS NAME [FIRST_NAME]" (FIRST_NAME: the name
threading gave it before it renamed itself; the main thread's line too).
"""
import sys
import threading
import time

dur = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
rows = []
lock = threading.Lock()


def record(name, t0, first=""):
    with lock:
        rows.append((threading.get_native_id(), (time.monotonic() - t0) * 1e3, name, first))


def work():
    t0 = time.monotonic()
    first = threading.current_thread().name
    name = "req-%d" % threading.get_native_id()
    threading.current_thread().name = name
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    record(name, t0, first)


def spin():
    t0 = time.monotonic()
    stop = t0 + dur
    while time.monotonic() < stop:
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
        time.sleep(0.005)
    record("spin-a", t0)


print("READY", flush=True)
t0 = time.monotonic()
s = threading.Thread(target=spin, name="spin-a")
s.start()
while time.monotonic() < t0 + dur:
    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
s.join()
record(threading.current_thread().name, t0)
for tid, life, name, first in rows:
    print("thread", tid, "%.1f" % life, name, first)
sys.stdout.flush()
