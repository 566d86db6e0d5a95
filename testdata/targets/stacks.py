"""Test target: threads parked at known places; reports its own stacks.

Usage: python stacks.py TRUTH_PATH
Every thread, the main one included, parks at a stable point. A reporter
thread then records sys._current_frames() (the interpreter's own view:
function, file, line, innermost first) and threading's names to TRUTH_PATH,
prints READY and exits; the rest wait to be killed.
"""
import json
import os
import sys
import threading
import time


ready = []


def park_note():
    ready.append(threading.get_ident())


class Outer:
    class Inner:
        def method(self, n):
            if n == 0:
                park_note()
                time.sleep(3600)
            return self.method(n - 1)


def gen():
    park_note()
    yield time.sleep(3600)


def ünïcode_lock():
    lock = threading.Lock()
    lock.acquire()
    park_note()
    lock.acquire()


def 處理():
    park_note()
    threading.Event().wait()


def qualname(code):
    return getattr(code, "co_qualname", code.co_name)


def report(path):
    deadline = time.time() + 20
    while len(ready) < 5 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # let every parked thread enter its blocking call
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    natives = {t.ident: t.native_id for t in threading.enumerate()}
    threads = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        frames = []
        f = frame
        while f is not None:
            frames.append({"function": qualname(f.f_code), "file": f.f_code.co_filename, "line": f.f_lineno})
            f = f.f_back
        threads.append({"thread_id": ident, "name": names.get(ident, ""), "tid": natives.get(ident, 0), "frames": frames})
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"pid": os.getpid(), "threads": threads}, fh, ensure_ascii=False)
    os.rename(path + ".tmp", path)
    print("READY", flush=True)


def main():
    threading.Thread(target=lambda: Outer.Inner().method(12), name="worker-1").start()
    threading.Thread(target=lambda: list(gen()), name="gen-thread").start()
    threading.Thread(target=ünïcode_lock, name="žluťoučký").start()
    threading.Thread(target=處理, name="線程-🐍").start()
    threading.Thread(target=report, args=(sys.argv[1],), name="reporter").start()
    park_note()
    time.sleep(3600)


if __name__ == "__main__":
    main()
