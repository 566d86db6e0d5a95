"""offcpu's account against the program's own: context switches and the
lives of threads and processes that end while observed.

usage: offcpu_account.py TRUTH [--fork N] [--sleeps N]

Four threads sleep 2 ms --sleeps times (default 400), each then reads its
own voluntary + nonvoluntary switch counts (/proc/thread-self/status) and
ends; --fork N forks N children one after the other, each burning ~20 ms
and ending at once. Every thread and child notes its life on
CLOCK_MONOTONIC (time.monotonic(), the clock the kernel's events carry):
from its first line to its last. The main thread reads its own counts
last. TRUTH gets one JSON document: {"pid", "switches", "lives":
[{"tid", "start", "end"}]}; then the process exits at once.
"""
import json
import os
import sys
import threading
import time

START = time.monotonic()
truth_path = sys.argv[1]
args = sys.argv[2:]
opts = dict(zip(args[::2], args[1::2]))
forks = int(opts.get("--fork", "0"))
sleeps = int(opts.get("--sleeps", "400"))


def switches(path):
    n = 0
    with open(path) as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                n += int(line.split()[1])
    return n


lives, counts, lock = [], [], threading.Lock()


def sleeper():
    t0 = time.monotonic()
    for _ in range(sleeps):
        time.sleep(0.002)
    n = switches("/proc/thread-self/status")
    with lock:
        counts.append(n)
        lives.append({"tid": threading.get_native_id(), "start": t0, "end": time.monotonic()})


r, w = os.pipe()
for _ in range(forks):
    pid = os.fork()
    if pid == 0:
        t0 = time.monotonic()
        end = time.thread_time() + 0.02  # CPU time: a hog beside must not shorten it
        while time.thread_time() < end:
            pass
        os.write(w, ("%d %.9f %.9f\n" % (os.getpid(), t0, time.monotonic())).encode())
        os._exit(0)
    os.waitpid(pid, 0)
os.close(w)
with os.fdopen(r) as f:
    for line in f.read().split("\n"):
        if line:
            p, a, b = line.split()
            lives.append({"tid": int(p), "start": float(a), "end": float(b)})

ts = [threading.Thread(target=sleeper, name="sleeper%d" % i) for i in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
doc = {"pid": os.getpid(), "switches": sum(counts)}
doc["switches"] += switches("/proc/thread-self/status")
lives.append({"tid": os.getpid(), "start": START, "end": time.monotonic()})
doc["lives"] = lives
out = os.open(truth_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(out, json.dumps(doc).encode())
os._exit(0)
