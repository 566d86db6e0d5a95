"""A thread that holds the GIL for an hour, in C: ctypes.PyDLL calls keep
the GIL, and libc's sleep() is called through one. Two threads spin in
Python beside it. Prints READY once the holder is in its call.

On a free-threaded build there is no GIL to hold unless the interpreter
runs with it enabled (PYTHON_GIL=1): then the holder has it and the
spinners wait for it. The holder prints READY just before its call."""
import ctypes
import threading
import time


def spin():
    while True:
        pass


for i in range(2):
    threading.Thread(target=spin, name="spin-%d" % i, daemon=True).start()


def hold():
    # READY from here: with the GIL enabled, once the holder is in its
    # call no other thread runs again.
    print("READY", flush=True)
    ctypes.PyDLL(None).sleep(3600)


time.sleep(0.2)
threading.Thread(target=hold, name="gil-holder", daemon=True).start()
time.sleep(3600)
