"""Threads that each sleep once (10 ms) and exit, 16 at a time, for
argv[1] seconds: every sleep must be in its thread's classes and in the
profile, whenever pyobs sweeps the threads that exited."""
import sys
import threading
import time


def worker():
    time.sleep(0.01)


end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    ts = [threading.Thread(target=worker) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
