"""Test target: a stack that never stops changing.

"cruncher" recurses to a pseudo-random depth (0..60) in a CPU-bound loop,
holding the GIL almost all the time; "sleeper" sleeps; main joins.
Prints READY once both run.
"""
import threading
import time


def leaf(n):
    x = 0
    for i in range(50):
        x += i * n
    return x


def recurse(depth, n):
    if depth == 0:
        return leaf(n)
    return recurse(depth - 1, n) + 1


def crunch():
    seed = 1
    while True:
        seed = (seed * 1103515245 + 12345) % 2**31
        recurse(seed % 61, seed)


def sleep_forever():
    while True:
        time.sleep(1)


threading.Thread(target=crunch, name="cruncher", daemon=True).start()
threading.Thread(target=sleep_forever, name="sleeper", daemon=True).start()
time.sleep(0.2)
print("READY", flush=True)
threading.Event().wait()
