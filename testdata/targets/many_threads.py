"""Benchmark target: N threads (argv[1], default 50), each parked at
recursion depth D (argv[2], default 20). Prints READY when all are parked."""
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
D = int(sys.argv[2]) if len(sys.argv) > 2 else 20
parked = threading.Semaphore(0)


def dive(d):
    if d == 0:
        parked.release()
        time.sleep(3600)
    return dive(d - 1)


for i in range(N):
    threading.Thread(target=dive, args=(D,), name="worker-%d" % i, daemon=True).start()
for _ in range(N):
    parked.acquire()
print("READY", flush=True)
time.sleep(3600)
