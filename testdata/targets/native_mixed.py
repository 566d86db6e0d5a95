"""Test target for --native: Python → C → Python and C leaves.

"qsort" (default): caller() sorts a ctypes int array with libc qsort and
a Python comparison function (a ctypes callback): samples run caller →
qsort's libc frames → libffi/_ctypes callback frames → compare.
"zlib": compressor() calls zlib.compress on a large buffer: samples end
in zlib's C code (deflate, longest_match, …) under compressor.
"sha": hasher() calls hashlib.sha256 on a large buffer.
"io": rw() writes and reads a pipe in large blocks: kernel time under rw.
"iomix": iomix() alternates pipe writes and reads with a pure-Python loop:
part of its CPU time in the kernel, part in user space.
"deep N": recurse N levels, each through a C call (map/list), then spin:
the native stack is deep.
Prints READY once running.
"""
import ctypes
import ctypes.util
import hashlib
import os
import sys
import zlib


CMPFUNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def compare(a, b):
    x, y = a[0], b[0]
    return (x > y) - (x < y)


def caller(libc, n):
    arr = (ctypes.c_int * n)(*[(i * 7919) % n for i in range(n)])
    libc.qsort(arr, n, ctypes.sizeof(ctypes.c_int), CMPFUNC(compare))
    return arr


def qsort_forever():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.qsort.restype = None
    while True:
        caller(libc, 5000)


def compressor(buf):
    return zlib.compress(buf, 6)


def zlib_forever():
    # Compressible but not trivial: deflate's match search does the work.
    buf = b"".join(b"%d lorem ipsum %d dolor sit amet\n" % (i, i * 7 % 1013) for i in range(200000))
    while True:
        compressor(buf)


def hasher(buf):
    return hashlib.sha256(buf).digest()


def sha_forever():
    buf = os.urandom(1 << 24)
    while True:
        hasher(buf)


def rw():
    r, w = os.pipe()
    block = b"x" * 65536
    while True:
        os.write(w, block)
        os.read(r, 65536)


def iomix():
    r, w = os.pipe()
    block = b"x" * 65536
    while True:
        for _ in range(60):
            os.write(w, block)
            os.read(r, 65536)
        x = 0
        for i in range(20000):
            x += i


def deep(n):
    if n == 0:
        while True:
            pass
    return list(map(deep, [n - 1]))


print("READY", flush=True)
mode = sys.argv[1] if len(sys.argv) > 1 else "qsort"
if mode == "zlib":
    zlib_forever()
elif mode == "sha":
    sha_forever()
elif mode == "io":
    rw()
elif mode == "iomix":
    iomix()
elif mode == "deep":
    sys.setrecursionlimit(10000)
    deep(int(sys.argv[2]))
else:
    qsort_forever()
