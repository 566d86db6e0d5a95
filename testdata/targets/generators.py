"""Test target: threads driving generators, coroutines and `yield from` in
tight loops, each started with _thread.start_new_thread so that its outermost
Python frame is its own entry function (the ground truth a walker's stack
must end at): drive_for, drive_next, drive_yield_from, drive_coro, drive_sum.
The main thread parks in main() under <module>.

Usage: python generators.py
Prints READY once every driver runs; runs until killed.
"""
import _thread
import sys
import time

started = []


def numbers(n):
    i = 0
    while i < n:
        yield i
        i += 1


def leaf_gen(n):
    for i in range(n):
        yield i * 2


def middle_gen(n):
    yield from leaf_gen(n)
    yield from numbers(n)


def outer_gen(n):
    x = yield from middle_gen(n)
    return x


class Awaitable:
    def __await__(self):
        yield 1


async def inner_coro(n):
    total = 0
    for _ in range(n):
        await Awaitable()
        total += 1
    return total


async def mid_coro(n):
    return await inner_coro(n)


async def outer_coro(n):
    return await mid_coro(n)


def drive_for():
    started.append("for")
    while True:
        total = 0
        for x in numbers(50):
            total += x


def drive_next():
    started.append("next")
    while True:
        g = numbers(50)
        while True:
            try:
                next(g)
            except StopIteration:
                break


def drive_yield_from():
    started.append("yield_from")
    while True:
        for x in outer_gen(20):
            pass


def drive_coro():
    started.append("coro")
    while True:
        c = outer_coro(20)
        try:
            while True:
                c.send(None)
        except StopIteration:
            pass


def drive_sum():
    started.append("sum")
    while True:
        sum(leaf_gen(50))
        list(middle_gen(10))


def main():
    for fn in (drive_for, drive_next, drive_yield_from, drive_coro, drive_sum):
        _thread.start_new_thread(fn, ())
    while len(started) < 5:
        time.sleep(0.01)
    print("READY", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.setswitchinterval(0.001)
    main()
