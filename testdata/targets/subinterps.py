"""Test target: the main interpreter plus two sub-interpreters, each with a
thread of its own parked in a sleep.

Usage: python subinterps.py
Prints READY, then "IDS <id1> <id2>": the runtime's ids of the two
sub-interpreters (the main interpreter's is 0). Each sub-interpreter's thread is named
"sub-<id>"; the main thread parks in main_park().
"""
import sys
import time

try:
    from concurrent import interpreters  # 3.14+
except ImportError:
    interpreters = None
    try:
        import _interpreters as lowlevel  # 3.13
    except ImportError:
        import _xxsubinterpreters as lowlevel  # 3.12

keep = []


def new_interp():
    if interpreters is not None:
        x = interpreters.create()
        keep.append(x)
        return x.id
    return lowlevel.create()


def run(iid, code):
    if interpreters is not None:
        for x in keep:
            if x.id == iid:
                x.exec(code)
        return
    err = lowlevel.run_string(iid, code)
    if err:
        raise RuntimeError(err)


SUB = """
import threading, time
def sub_park():
    time.sleep(3600)
threading.Thread(target=sub_park, name="sub-%d").start()
"""


def main_park():
    time.sleep(3600)


def main():
    ids = [new_interp() for _ in range(2)]
    for iid in ids:
        run(iid, SUB % iid)
    time.sleep(0.2)
    print("READY", flush=True)
    print("IDS", *ids, flush=True)
    main_park()


if __name__ == "__main__":
    main()
