"""Test target: Python → C → Python, and a syscall loop.

"sort" (default): caller() sorts a list with key=keyfn, so the kernel's CPU
samples land in list.sort's C code and in the Python key function it calls
back: native frames sit between caller and keyfn.
"syscall": spin() calls os.getpid()/os.read of /dev/zero in a loop, so
samples land in the kernel under it.
Prints READY once running.
"""
import os
import sys


def keyfn(x):
    y = x
    for i in range(20):
        y = (y * 31 + i) % 1000003
    return y


def caller(data):
    return sorted(data, key=keyfn)


def sort_forever():
    data = list(range(20000))
    while True:
        caller(data)


def spin():
    fd = os.open("/dev/zero", os.O_RDONLY)
    while True:
        os.read(fd, 65536)
        os.getppid()


print("READY", flush=True)
if sys.argv[1:] == ["syscall"]:
    spin()
else:
    sort_forever()
