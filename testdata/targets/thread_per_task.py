"""One short-lived thread per task, one at a time, for ever: each burns
~1.5 M loop steps and exits, the next one starts (a thread-per-request
server's shape). The process pins itself to CPU 0 (its threads inherit
it), where the test runs a competitor: every thread waits for the CPU."""
import os
import threading

os.sched_setaffinity(0, {0})
print("READY", flush=True)


def burn():
    x = 0
    for i in range(1500000):
        x += i


while True:
    t = threading.Thread(target=burn)
    t.start()
    t.join()
