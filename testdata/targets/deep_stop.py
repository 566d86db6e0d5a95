"""Test target: a stack DEPTH calls deep.

Usage: python deep_stop.py DEPTH spin|stop
At the bottom it counts its own Python frames and prints
"READY", then "<frames> <line>", <line> being where it then is: stopped by its
own SIGSTOP (stop), or spinning (spin; after a SIGCONT, stop spins too).
"""
import os
import signal
import sys

sys.setrecursionlimit(1000000)
depth, mode = int(sys.argv[1]), sys.argv[2]


def frames():
    n, f = 0, sys._getframe(1)
    while f is not None:
        n += 1
        f = f.f_back
    return n


def bottom():
    n = frames()  # this frame and all its callers
    if mode == "stop":
        print("READY\n%d %d" % (n, sys._getframe().f_lineno + 1), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # the process stops on this line
    print("READY\n%d %d" % (n, sys._getframe().f_lineno + 1), flush=True)
    while True: x = 1  # noqa: E701 (one line: the frame's line while it spins)


def rec(n):
    if n == 0:
        return bottom()
    return rec(n - 1)


rec(depth)
