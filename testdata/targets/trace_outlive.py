"""Test target for a trace window shorter than the program: THREADS
threads (the main one included) fail os.stat on a missing path for SECS
seconds, then the program exits with status 7.

Usage: python trace_outlive.py SECS THREADS
Prints "THREADS n" (its own task count once its threads run), and at its
end "EXIT 7"; a SIGTERM, SIGINT or SIGHUP prints "SIGNALLED n" instead and
exits with 100+n: the ground truth of whether anything ended it.
"""
import os
import signal
import sys
import threading
import time

SECS, N = float(sys.argv[1]), int(sys.argv[2])
END = time.monotonic() + SECS


def signalled(sig, _frame):
    print("SIGNALLED", sig, flush=True)
    os._exit(100 + sig)


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signalled)


def work():
    while time.monotonic() < END:
        try:
            os.stat("/nonexistent-pyobs-outlive/x")
        except FileNotFoundError:
            pass
        time.sleep(0.001)


threads = [threading.Thread(target=work) for _ in range(N - 1)]
for t in threads:
    t.start()
print("THREADS", len(os.listdir("/proc/self/task")), flush=True)
work()
for t in threads:
    t.join()
print("EXIT 7", flush=True)
sys.exit(7)
