"""Test target for `pyobs offcpu`: threads that wait in known ways.

Usage: python offcpu_waits.py MODE
  lock: "holder" holds a threading.Lock ~80 % of the time (sleeping inside
        it: 8.5 ms held, 1.5 ms free); "waiter" acquires it in wait_for_lock().
  io:   "reader" blocks in os.read on a pipe nobody writes (read_pipe()),
        "sleeper" in time.sleep (nap()), "burner" burns CPU (burn()).
  cpu2: "spin-a" and "spin-b" burn CPU (spin()): GIL contention.
The main thread sleeps. Prints READY once every thread runs; runs 1 h.
"""
import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "lock"
lock = threading.Lock()
started = threading.Barrier(1 + {"lock": 2, "io": 3, "cpu2": 2}[MODE])


def holder():
    started.wait()
    while True:
        with lock:
            time.sleep(0.0085)
        time.sleep(0.0015)


def wait_for_lock():
    lock.acquire()
    lock.release()


def waiter():
    started.wait()
    time.sleep(0.01)
    while True:
        wait_for_lock()
        time.sleep(0.0002)


def read_pipe(fd):
    return os.read(fd, 1)


def reader():
    r, w = os.pipe()
    started.wait()
    read_pipe(r)


def nap():
    time.sleep(3600)


def sleeper():
    started.wait()
    nap()


def burn():
    x = 0
    while True:
        x += 1


def burner():
    started.wait()
    burn()


def spin():
    started.wait()
    x = 0
    while True:
        x += 1


threads = {
    "lock": [("holder", holder), ("waiter", waiter)],
    "io": [("reader", reader), ("sleeper", sleeper), ("burner", burner)],
    "cpu2": [("spin-a", spin), ("spin-b", spin)],
}[MODE]
for name, fn in threads:
    threading.Thread(target=fn, name=name, daemon=True).start()
started.wait()
print("READY", flush=True)
time.sleep(3600)
