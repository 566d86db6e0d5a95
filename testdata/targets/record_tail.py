"""Two CPU-bound phases and an exit: what `record -- CMD` must name to the
end. first() runs argv[1] seconds, last() argv[2] seconds (wall), then the
program exits at once; the samples taken in last() just before the exit
are named after it exited.
"""
import sys
import time


def burn(d):
    end = time.monotonic() + d
    x = 0
    while time.monotonic() < end:
        x += 1
    return x


def first(d):
    return burn(d)


def last(d):
    return burn(d)


first(float(sys.argv[1]))
last(float(sys.argv[2]))
