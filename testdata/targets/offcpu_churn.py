"""Test target for `pyobs offcpu`'s bounds: short-lived threads, many.

Usage: python offcpu_churn.py [ALIVE]
Keeps up to ALIVE (default 8) threads alive at once, each of which sleeps
1 ms and exits, and starts a new one as soon as one ends. Prints READY,
then every 100 ms "created N alive M" (N: threads started so far).
"""
import sys
import threading
import time

ALIVE = int(sys.argv[1]) if len(sys.argv) > 1 else 8
slots = threading.Semaphore(ALIVE)
created = 0


def short():
    time.sleep(0.001)
    slots.release()


def spawner():
    global created
    while True:
        slots.acquire()
        threading.Thread(target=short, daemon=True).start()
        created += 1


threading.Thread(target=spawner, name="spawner", daemon=True).start()
print("READY", flush=True)
while True:
    time.sleep(0.1)
    print("created", created, "alive", threading.active_count(), flush=True)
