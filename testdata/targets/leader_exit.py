"""Test target: a process whose main thread exits while a worker runs on.

The worker runs worker_loop (CPU, then a 1 ms sleep, over and over); the main thread prints "READY", then
the worker's native id, and then (after argv[1] seconds, default 0) ends
itself with pthread_exit (no Python exit: the process lives on, its leader
a zombie in /proc).
"""
import ctypes
import sys
import threading
import time

started = threading.Event()


def worker_loop():
    started.set()
    while True:
        x = 0
        for i in range(20000):
            x += i
        time.sleep(0.001)  # a syscall for trace to see


w = threading.Thread(target=worker_loop, name="worker", daemon=False)
w.start()
started.wait()
print("READY\n%d" % w.native_id, flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
ctypes.CDLL(None).pthread_exit(None)
