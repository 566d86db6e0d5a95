"""Compiles a new module every iteration and runs it: f_N calls g_N, both
defined in gen_N.py, then the module is dropped. The allocator hands the
next module's code objects (and its strings) the addresses the last one
freed, so a sample's code address names a different function a moment
later.

usage: code_churn.py SECONDS
Prints READY, then at the end "iterations N reused R": R iterations whose
g code object sat at an address an earlier g had (the premise)."""
import sys
import time

TEMPLATE = """
def g_{n}():
    x = 0
    for i in range(20000):
        x += i
    return x
def f_{n}():
    return g_{n}()
"""


def run(n, seen):
    ns = {}
    exec(compile(TEMPLATE.format(n=n), f"gen_{n}.py", "exec"), ns)
    g = ns[f"g_{n}"].__code__
    reused = id(g) in seen
    seen.add(id(g))
    ns[f"f_{n}"]()
    return reused


def main():
    end = time.monotonic() + float(sys.argv[1])
    print("READY", flush=True)
    n = reused = 0
    seen = set()
    while time.monotonic() < end:
        reused += run(n, seen)
        n += 1
    print("iterations", n, "reused", reused, flush=True)


main()
