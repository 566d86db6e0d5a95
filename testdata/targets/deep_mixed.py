"""Test target: deep stacks of both kinds, parked.

Usage: python deep_mixed.py
A thread recurses 400 deep in plain functions (its frames span several
data-stack chunks) and parks; the main thread parks at the bottom of a
60-deep chain of generators delegating with `yield from` (each frame in its
own heap object). Prints READY when both are parked.
"""
import threading
import time

parked = threading.Event()


def recurse(n):
    if n == 0:
        parked.set()
        time.sleep(3600)
    return recurse(n - 1) + 1


def gen_chain(n):
    if n == 0:
        yield time.sleep(3600)
    yield from gen_chain(n - 1)


if __name__ == "__main__":
    threading.Thread(target=recurse, args=(400,), name="deep").start()
    parked.wait()
    print("READY", flush=True)
    for _ in gen_chain(60):
        pass
