"""Test target for `pyobs trace`: blocks in raw libc calls that surface EINTR.

Python retries most calls on EINTR itself (PEP 475), so this target calls
libc read() and nanosleep() through ctypes and counts EINTR returns.
Usage: python trace_eintr.py [--run SECONDS]
Prints READY, then a line "STATUS reads=R sleeps=S eintr=E" every 0.1 s.
"""
import ctypes
import os
import sys
import threading
import time

args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
end = time.monotonic() + float(opts.get("--run", "3600"))
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
counts = {"reads": 0, "sleeps": 0, "eintr": 0}
lock = threading.Lock()


class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def writer():
    while True:
        time.sleep(0.02)
        os.write(w, b"x")


def reader():
    buf = ctypes.create_string_buffer(16)
    while True:
        n = libc.read(r, buf, 16)
        with lock:
            if n < 0 and ctypes.get_errno() == 4:
                counts["eintr"] += 1
            else:
                counts["reads"] += 1


def sleeper():
    ts = timespec(0, 30_000_000)
    while True:
        rc = libc.nanosleep(ctypes.byref(ts), None)
        with lock:
            if rc != 0 and ctypes.get_errno() == 4:
                counts["eintr"] += 1
            else:
                counts["sleeps"] += 1


for fn in (writer, reader, sleeper):
    threading.Thread(target=fn, daemon=True).start()
print("READY", flush=True)
while time.monotonic() < end:
    time.sleep(0.1)
    with lock:
        print("STATUS reads=%d sleeps=%d eintr=%d" % (counts["reads"], counts["sleeps"], counts["eintr"]), flush=True)
