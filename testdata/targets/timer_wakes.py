"""Test target: timer wake-ups on a busy CPU.

The whole process is pinned to one CPU (argv[1], default the last one):
"sleeper" sleeps 10 ms at a time — only its timer wakes it, from the timer
interrupt — while "burner" spins on that same CPU, so each of the
sleeper's wake-ups interrupts the burner (or whatever else runs there).
A 1 ms switch interval keeps the sleeper's wait for the GIL after each
wake-up short beside its sleep.
Prints READY, then "TIDS sleeper=N burner=M" (native thread ids).
"""
import os
import sys
import threading
import time

cpu = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count() - 1
os.sched_setaffinity(0, {cpu})  # before the threads: they inherit it
sys.setswitchinterval(0.001)

tids = {}


def sleeper():
    tids["sleeper"] = threading.get_native_id()
    while True:
        time.sleep(0.01)


def burner():
    tids["burner"] = threading.get_native_id()
    x = 0
    while True:
        x += 1


threading.Thread(target=sleeper, name="sleeper", daemon=True).start()
threading.Thread(target=burner, name="burner", daemon=True).start()
while len(tids) < 2:
    time.sleep(0.01)
print("READY", flush=True)
print(f"TIDS sleeper={tids['sleeper']} burner={tids['burner']}", flush=True)
threading.Event().wait()
