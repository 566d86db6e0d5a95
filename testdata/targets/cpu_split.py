"""Test target for CPU attribution.

Each cycle: heavy() burns 2 units of the thread's CPU time, light() 1 unit
(both measured with time.thread_time), then rest() sleeps 3 units. caller()
calls work() from three different lines (marked call-A/B/C) with 3:2:1 CPU.
Runs CYCLES cycles after READY (heavy/light/rest, or with "callers" only
caller()), then prints its own totals as JSON and exits.
Usage: cpu_split.py UNIT_MS CYCLES [callers]
"""
import json
import sys
import time

UNIT = float(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 0.01
CYCLES = int(sys.argv[2]) if len(sys.argv) > 2 else 100
spent = {"heavy": 0.0, "light": 0.0, "rest_wall": 0.0, "busy_wall": 0.0, "work": [0.0, 0.0, 0.0]}


def burn(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def heavy():
    t = time.thread_time()
    burn(2 * UNIT)
    spent["heavy"] += time.thread_time() - t


def light():
    t = time.thread_time()
    burn(UNIT)
    spent["light"] += time.thread_time() - t


def rest():
    t = time.monotonic()
    time.sleep(3 * UNIT)
    spent["rest_wall"] += time.monotonic() - t


def work(i, units):
    t = time.thread_time()
    burn(units * UNIT / 2)
    spent["work"][i] += time.thread_time() - t


def caller():
    work(0, 3)  # call-A
    work(1, 2)  # call-B
    work(2, 1)  # call-C


def main():
    callers = len(sys.argv) > 3 and sys.argv[3] == "callers"
    print("READY", flush=True)
    for _ in range(CYCLES):
        if callers:
            caller()
        else:
            t = time.monotonic()
            heavy()
            light()
            spent["busy_wall"] += time.monotonic() - t
            rest()
    print(json.dumps(spent), flush=True)


main()
