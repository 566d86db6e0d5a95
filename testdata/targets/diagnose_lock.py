"""Test target for `pyobs diagnose`: lock contention.

"holder" holds a threading.Lock 90 % of the time (sleeping 9 ms inside it,
1 ms outside); the main thread and "waiter" both take it in
wait_for_lock(), so most of their time is spent waiting for the holder.
With the argument "mixed", a "burner" thread also burns CPU in burn().
Prints READY once every thread runs; runs until killed.
"""
import sys
import threading
import time

MIXED = sys.argv[1:] == ["mixed"]

lock = threading.Lock()
started = threading.Barrier(4 if MIXED else 3)


def holder():
    started.wait()
    while True:
        with lock:
            time.sleep(0.009)
        time.sleep(0.001)


def wait_for_lock():
    lock.acquire()
    lock.release()


def waiter():
    started.wait()
    while True:
        wait_for_lock()
        time.sleep(0.0001)


def burn():
    started.wait()
    x = 0
    while True:
        x += 1


if MIXED:
    threading.Thread(target=burn, name="burner", daemon=True).start()
threading.Thread(target=holder, name="holder", daemon=True).start()
threading.Thread(target=waiter, name="waiter", daemon=True).start()
started.wait()
print("READY", flush=True)
while True:
    wait_for_lock()
    time.sleep(0.0001)
