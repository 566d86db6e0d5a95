"""Test target: two CPU-bound threads ("spin-a", "spin-b"), two idle ones,
and a spawner that starts a short-lived CPU-bound thread ("brief-N", ~0.3 s
each) one after another. Runs SECONDS (argv[1]) after READY, then exits."""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
stop = time.monotonic() + 3600


def spin():
    x = 0
    while time.monotonic() < stop:
        x += 1


def idle():
    while time.monotonic() < stop:
        time.sleep(0.05)


def brief():
    end = time.monotonic() + 0.3
    x = 0
    while time.monotonic() < end:
        x += 1


def spawner():
    n = 0
    while time.monotonic() < stop:
        t = threading.Thread(target=brief, name="brief-%d" % n)
        t.start()
        t.join()
        n += 1
        time.sleep(0.2)


for name, fn in [("spin-a", spin), ("spin-b", spin), ("idle-1", idle), ("idle-2", idle), ("spawner", spawner)]:
    threading.Thread(target=fn, name=name, daemon=True).start()
print("READY", flush=True)
stop = time.monotonic() + SECONDS
time.sleep(SECONDS + 0.5)
