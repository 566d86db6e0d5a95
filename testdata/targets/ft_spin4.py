"""Test target for free-threaded builds: four CPU-bound threads ("spin-0"
.. "spin-3") that never block, so without a GIL they run truly in
parallel (as many at once as there are cores). The main thread sleeps.
Prints READY once all four run; runs SECONDS (argv[1], default 3600)."""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3600
started = threading.Barrier(5)


def spin():
    started.wait()
    end = time.monotonic() + SECONDS
    x = 0
    while time.monotonic() < end:
        x += 1


for i in range(4):
    threading.Thread(target=spin, name="spin-%d" % i, daemon=True).start()
started.wait()
print("READY", flush=True)
time.sleep(SECONDS)
