"""Test target for the in-kernel walker: a 12-deep call chain that changes
every few microseconds, with a generator in the middle, on the main thread
and on a thread born after READY.

Usage: python kwalk_deep.py [deep N]   (then SIGUSR1 starts the late thread)

Call structure (the test checks every sampled stack against it): a line
ending in "# calls NAME" is the only line of its function that calls NAME.
On the main thread (entry: <module>) and on a thread born when the observer
sends SIGUSR1 (entry: late, below threading's frames):
run -> f1 -> f2 -> ... -> f6 -> g7 (a generator, driven by f6's for loop;
it delegates to g7b with yield from) or c7 (a coroutine, resumed from C by
send) -> f8 -> ... -> f12 (the leaf, a short loop).
With "deep N" the main thread instead recurses N levels in down() and spins
there. Prints READY and runs until killed.
"""
import signal
import sys
import threading


def f12(n):
    x = 0
    for i in range(n):
        x += i
    return x


def f11(n):
    return f12(n) + 1  # calls f12


def f10(n):
    return f11(n) + 1  # calls f11


def f9(n):
    return f10(n) + 1  # calls f10


def f8(n):
    return f9(n) + 1  # calls f9


def g7b(n):
    yield f8(n)  # calls f8


def g7(n):
    for k in range(2):
        yield f8(n + k)  # calls f8
    yield from g7b(n)  # calls g7b


async def c7(n):
    return f8(n)  # calls f8


def f6(n):
    s = 0
    for v in g7(n):  # calls g7
        s += v
    try:
        c7(n).send(None)  # calls c7
    except StopIteration as e:
        s += e.value
    return s


def f5(n):
    return f6(n) + 1  # calls f6


def f4(n):
    return f5(n) + 1  # calls f5


def f3(n):
    return f4(n) + 1  # calls f4


def f2(n):
    return f3(n) + 1  # calls f3


def f1(n):
    return f2(n) + 1  # calls f2


def run():
    i = 0
    while True:
        i += 1
        f1(i % 23)  # calls f1


def late():
    run()  # calls run


def starter():
    # The late thread is born when the observer says so (SIGUSR1, blocked
    # in every thread and taken here): after it last listed the threads.
    signal.sigwait({signal.SIGUSR1})
    threading.Thread(target=late, daemon=True).start()


def down(n):
    if n == 0:
        while True:
            pass
    return down(n - 1)  # calls down


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
threading.Thread(target=starter, daemon=True).start()
print("READY", flush=True)
if len(sys.argv) > 2 and sys.argv[1] == "deep":
    down(int(sys.argv[2]))  # calls down
run()  # calls run
