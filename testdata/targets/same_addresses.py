"""Test target: two forked children run, each, a function of its own
compiled after the fork. Forked from the same line of the same state,
they allocate alike: each one's function has its code object at the same
address as the other's, the same line numbers and the same callers, so
the two stacks hash alike in the kernel while they name different
functions.

Usage: python same_addresses.py MODE N
MODE fail: each child makes N failing os.rmdir calls (ENOENT) from its
function; MODE spin: each spins for N ms of CPU in it; MODE sleep: each
sleeps N times 1 ms in it. Each child prints "NAME PID CODE_ADDRESS" first.
"""
import os
import sys
import time

MODE, N = sys.argv[1], int(sys.argv[2])
SRC = """
def {name}(mode, n):
    if mode == "fail":
        for _ in range(n):
            try:
                os.rmdir("/nonexistent-pyobs-same-addresses")
            except FileNotFoundError:
                pass
    elif mode == "spin":
        end = time.thread_time() + n / 1000
        while time.thread_time() < end:
            pass
    else:
        for _ in range(n):
            time.sleep(0.001)
"""


def child(name):
    ns = {"os": os, "time": time}
    exec(compile(SRC.format(name=name), "worker.py", "exec"), ns)
    # One write: the two children share the pipe.
    os.write(1, ("%s %d %s\n" % (name, os.getpid(), hex(id(ns[name].__code__)))).encode())
    ns[name](MODE, N)
    os._exit(0)


kids = []
for name in ("work_aa", "work_bb"):
    pid = os.fork()
    if pid == 0:
        child(name)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
