"""offcpu -- CMD observes from the first instruction: this program's first
acts are CPU work and a sleep, timed by itself; TRUTH gets its account.

usage: held_start.py TRUTH
"""
import json
import sys
import time


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
with open(sys.argv[1], "w") as f:
    json.dump({"slept": slept, "cpu": time.thread_time()}, f)
