"""Test target for `pyobs stat`: burns CPU in one thread and reports its own truth.

Usage: python cpu_burn.py [--cpu N] [--seconds S | --cpu-seconds C] [--exit CODE]
Prints READY, then every 50 ms a line "T <time.monotonic()> <time.process_time()>
<thread_time of the burner>" so a test can compute the CPU time the process
itself measured over any interval. --cpu pins the process to CPU N;
--seconds ends the burn (and the process, with --exit CODE) after S seconds
of wall time, --cpu-seconds after the burner thread used C seconds of CPU.
"""
import os
import sys
import threading
import time

args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
if "--cpu" in opts:
    os.sched_setaffinity(0, {int(opts["--cpu"])})
seconds = float(opts.get("--seconds", "3600"))
cpu_seconds = float(opts.get("--cpu-seconds", "1e9"))
burner_cpu = [0.0]


def burn():
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end and burner_cpu[0] < cpu_seconds:
        for i in range(10000):
            x += i
        burner_cpu[0] = time.thread_time()


t = threading.Thread(target=burn, name="burner", daemon=True)
t.start()
print("READY", flush=True)
while t.is_alive():
    print("T %.6f %.6f %.6f" % (time.monotonic(), time.process_time(), burner_cpu[0]), flush=True)
    t.join(0.05)
sys.exit(int(opts.get("--exit", "0")))
