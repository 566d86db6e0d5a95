"""Benchmark target for `pyobs offcpu`: a context-switch-heavy fixed workload.

Usage: python offcpu_pingpong.py [ROUNDS [WORK]]
Two threads ("ping", "pong") pass one byte back and forth through two pipes
ROUNDS times (default 100000): every pass blocks one thread in os.read and
wakes the other, so each round is at least two context switches per thread.
WORK (default 0): loop iterations of Python work per pass, to lower the
switch rate.
Prints READY, waits for a line on stdin, runs, then prints
"ROUNDS rounds in SECONDS" — its own wall time, the benchmark's truth.
"""
import os
import sys
import threading
import time

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
WORK = int(sys.argv[2]) if len(sys.argv) > 2 else 0
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()


def work():
    x = 0
    for _ in range(WORK):
        x += 1


def ping():
    for _ in range(ROUNDS):
        work()
        os.write(a_w, b"x")
        os.read(b_r, 1)


def pong():
    for _ in range(ROUNDS):
        os.read(a_r, 1)
        work()
        os.write(b_w, b"y")


print("READY", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
threads = [threading.Thread(target=ping, name="ping"), threading.Thread(target=pong, name="pong")]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("%d rounds in %.4f" % (ROUNDS, time.monotonic() - t0), flush=True)
