"""Test target for `pyobs diagnose`: lock contention.

"holder" holds a threading.Lock 90 % of the time (sleeping 9 ms inside it,
1 ms outside); the main thread and "waiter" both take it in
wait_for_lock(), so most of their time is spent waiting for the holder.
Prints READY once every thread runs; runs until killed.
"""
import threading
import time

lock = threading.Lock()
started = threading.Barrier(3)


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


threading.Thread(target=holder, name="holder", daemon=True).start()
threading.Thread(target=waiter, name="waiter", daemon=True).start()
started.wait()
print("READY", flush=True)
while True:
    wait_for_lock()
    time.sleep(0.0001)
