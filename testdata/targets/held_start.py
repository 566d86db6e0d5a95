"""offcpu -- CMD observes from the first instruction: this program's first
acts are CPU work and a sleep, timed by itself; TRUTH gets its account.

usage: held_start.py TRUTH
"""
import time

START = time.thread_time()  # the holder's start, the exec and the interpreter's

import json  # noqa: E402 (after START on purpose)
import os  # noqa: E402
import sys  # noqa: E402


def first_work(seconds):
    # CPU time of this thread, not wall: a CPU hog beside must not shorten it.
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def first_wait(seconds):
    t = time.monotonic()
    time.sleep(seconds)
    return time.monotonic() - t


first_work(0.08)
slept = first_wait(0.3)
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
doc = json.dumps({"slept": slept, "start": START, "cpu": time.thread_time()}).encode()
os.write(out, doc)
# At once: the interpreter's finalisation would add CPU time (5-20 ms on
# 3.11 beside a hog) after the count, which the observer sees.
os._exit(0)
