"""Test target for `pyobs stat`: writes and fsyncs a file in a loop (block I/O).

Usage: python io_heavy.py DIR
Prints READY, then forever: writes 256 KiB to DIR/io_heavy.dat, fsyncs,
truncates and starts again; prints "W <bytes written so far>" each round.
"""
import os
import sys

path = os.path.join(sys.argv[1], "io_heavy.dat")
block = os.urandom(256 * 1024)
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
print("READY", flush=True)
total = 0
while True:
    os.pwrite(fd, block, 0)
    os.fsync(fd)
    total += len(block)
    print("W %d" % total, flush=True)
