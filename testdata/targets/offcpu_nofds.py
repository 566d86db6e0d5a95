"""Test target for `pyobs offcpu`: waits in select and poll with and
without descriptors.

Usage: python offcpu_nofds.py TRUTH SECONDS
Threads, each for SECONDS, in 20 ms waits:
  "napper":    time.sleep in nap() (CPython 3.10: pselect6 on no fd;
               3.11+: clock_nanosleep);
  "emptysel":  select.select([], [], [], t) in empty_select() (pselect6
               on no fd, every version);
  "emptypoll": poll() of an empty select.poll in poll_nothing() (poll on
               no fd);
  "sockwait":  select.select on a socket nobody writes to, in
               wait_socket(): a real network wait, timed out.
The main thread joins them. Writes TRUTH (JSON): per function, the wall
seconds spent inside those calls, timed by the thread itself; then exits.
"""
import json
import select
import socket
import sys
import threading
import time

TRUTH, D = sys.argv[1], float(sys.argv[2])
T = 0.02
spent = {}


def timed(name, wait):
    total, end = 0.0, time.monotonic() + D
    while time.monotonic() < end:
        t0 = time.perf_counter()
        wait()
        total += time.perf_counter() - t0
    spent[name] = total


def nap():
    time.sleep(T)


def empty_select():
    select.select([], [], [], T)


def poll_nothing(p=select.poll()):
    p.poll(T * 1000)


a, b = socket.socketpair()


def wait_socket():
    select.select([a], [], [], T)


threads = [threading.Thread(target=timed, args=(f.__name__, f), name=n)
           for n, f in (("napper", nap), ("emptysel", empty_select), ("emptypoll", poll_nothing), ("sockwait", wait_socket))]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(TRUTH, "w") as f:
    json.dump(spent, f)
