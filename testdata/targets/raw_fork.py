"""Forks through the C library's fork(), bypassing Python's own fork
handling (os.fork cleans the child's interpreter up): the child keeps the
parent's thread states, its three waiting threads' among them, though only
the thread that forked lives in it. The child prints READY, then its pid
and the kernel's id of its one thread, and sleeps; the parent sleeps."""
import ctypes
import os
import threading
import time

ev = threading.Event()
for i in range(3):
    threading.Thread(target=ev.wait, name="pt%d" % i, daemon=True).start()
time.sleep(0.2)
if ctypes.CDLL(None).fork() == 0:
    print("READY", flush=True)
    print("CHILD %d %d" % (os.getpid(), threading.get_native_id()), flush=True)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
