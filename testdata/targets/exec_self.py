"""Test target: execs a new program in the middle of an observation.

Usage: python exec_self.py MODE SECONDS
Prints READY, reads one line from stdin (the observer is attached), then
works for SECONDS as MODE says, in functions named before_exec_*:
"burn" burns CPU; "io" writes one byte to /dev/null and sleeps 2 ms, again
and again. Then it prints "EXEC CPU WRITES" (its process_time and the
writes it made before the exec) and execs the same interpreter running
the same work forever in functions named after_exec_*: any after_exec_*
name, or a write beyond WRITES, seen by the observer is the new
program's.
"""
import os
import sys
import time

AFTER = '''
import os, time
def after_exec_burn():
    x = 0
    for i in range(100000):
        x += i
def after_exec_io(fd):
    os.write(fd, b"x")
    time.sleep(0.002)
fd = os.open("/dev/null", os.O_WRONLY)
while True:
    if MODE == "burn":
        after_exec_burn()
    else:
        after_exec_io(fd)
'''


def before_exec_burn():
    x = 0
    for i in range(100000):
        x += i


def before_exec_io(fd):
    os.write(fd, b"x")
    time.sleep(0.002)


def main():
    mode, seconds = sys.argv[1], float(sys.argv[2])
    print("READY", flush=True)
    sys.stdin.readline()
    fd = os.open("/dev/null", os.O_WRONLY)
    writes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if mode == "burn":
            before_exec_burn()
        else:
            before_exec_io(fd)
            writes += 1
    # One write (print may make several): the observer counts it.
    os.write(1, ("EXEC %r %d\n" % (time.process_time(), writes)).encode())
    os.execv(sys.executable, [sys.executable, "-c", "MODE = %r\n" % mode + AFTER])


main()
