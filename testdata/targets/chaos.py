"""Fault-injection target: a process that does everything at once and reports
what it saw, so a test can tell whether an observer harmed it.

- main thread: a work counter, incremented in chunks of 2000 with a 0.2 ms
  sleep between them (so the other threads get the GIL: with a switch
  interval of 1 ms the churn reaches ~800-950 threads/s on two cores and the
  counter's rate varies by less than 2x between 250 ms windows);
- "churn": creates and joins short threads at ~RATE per second (default 1000);
- "forker": forks a child that exits at once, every 20 ms, and reaps it;
- "pipe-reader": blocked in os.read() on a pipe nobody writes to;
- "sleeper": blocked in time.sleep();
- "raw-read", "raw-nanosleep", "raw-epoll": the same blocking calls made
  through ctypes, so an EINTR the kernel returns is seen here instead of
  being retried by CPython (PEP 475);
- "control": reads commands on stdin: "exit" (os._exit(0) at once, with all
  threads running) and "exec" (re-exec this script as the next generation);
- "reporter": every 50 ms prints "W GEN MONO COUNT THREADS FORKS".

Anything the observer must never cause is printed at once: "EINTR WHERE"
for an interrupted call, "SIG NAME" for a signal (handlers are installed for
SIGCONT, SIGTRAP, SIGCHLD is left alone), "DIED WHERE ERROR" for a thread that
failed. Prints "READY GEN PID" when every thread runs.

The interpreter's own argv prefix (for exec) comes from CHAOS_ARGV, a JSON
list; sys.executable is used when it is absent.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import signal
import sys
import threading
import time
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)  # fork with threads (3.12+)

sys.setswitchinterval(0.001)
GEN = int(os.environ.get("CHAOS_GEN", "1"))
RATE = float(os.environ.get("CHAOS_RATE", "1000"))
out_lock = threading.Lock()


def say(*parts):
    line = " ".join(str(p) for p in parts) + "\n"
    with out_lock:
        os.write(1, line.encode())


def on_signal(signum, frame):
    say("SIG", signal.Signals(signum).name)


for s in (signal.SIGCONT, signal.SIGTRAP):
    signal.signal(s, on_signal)

counter = 0
threads_made = 0
forks = 0
started = threading.Semaphore(0)


def guarded(name, fn):
    def run():
        started.release()
        try:
            fn()
        except InterruptedError as e:
            say("EINTR", name, repr(e))
        except BaseException as e:  # noqa: BLE001 - report, never hide
            say("DIED", name, repr(e).replace("\n", " "))
    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


def noop():
    pass


def churn():
    global threads_made
    t0 = time.monotonic()
    while True:
        th = threading.Thread(target=noop)
        th.start()
        th.join()
        threads_made += 1
        ahead = threads_made - (time.monotonic() - t0) * RATE
        if ahead > 0:
            time.sleep(ahead / RATE)


def forker():
    global forks
    while True:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        forks += 1
        time.sleep(0.02)


idle_r, idle_w = os.pipe()  # nobody ever writes: readers block forever


def pipe_reader():
    while True:
        try:
            os.read(idle_r, 1)
        except InterruptedError:
            say("EINTR", "os.read")


def sleeper():
    while True:
        try:
            time.sleep(3600)
        except InterruptedError:
            say("EINTR", "time.sleep")


libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def raw_read():
    r, _w = os.pipe()
    raw_read.keep = _w
    buf = ctypes.create_string_buffer(1)
    while True:
        n = libc.read(r, buf, 1)
        if n < 0 and ctypes.get_errno() == errno.EINTR:
            say("EINTR", "raw-read")


class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def raw_nanosleep():
    req, rem = Timespec(3600, 0), Timespec()
    while True:
        if libc.nanosleep(ctypes.byref(req), ctypes.byref(rem)) < 0 and ctypes.get_errno() == errno.EINTR:
            say("EINTR", "raw-nanosleep")


class EpollEvent(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


def raw_epoll():
    efd = libc.epoll_create1(0)
    ev = EpollEvent(1, 0)  # EPOLLIN on the idle pipe
    if libc.epoll_ctl(efd, 1, idle_r, ctypes.byref(ev)) < 0:
        raise OSError(ctypes.get_errno(), "epoll_ctl")
    evs = (EpollEvent * 1)()
    while True:
        if libc.epoll_wait(efd, evs, 1, -1) < 0 and ctypes.get_errno() == errno.EINTR:
            say("EINTR", "raw-epoll_wait")


def control():
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "exit":
            os._exit(0)
        if cmd == "exec":
            argv = json.loads(os.environ.get("CHAOS_ARGV", "null")) or [sys.executable]
            os.environ["CHAOS_GEN"] = str(GEN + 1)
            os.execv(argv[0], argv + [os.path.abspath(__file__)])
    os._exit(0)  # the harness went away


def reporter():
    while True:
        say("W", GEN, "%.6f" % time.monotonic(), counter, threads_made, forks)
        time.sleep(0.05)


def main():
    global counter
    workers = [("churn", churn), ("forker", forker), ("pipe-reader", pipe_reader), ("sleeper", sleeper),
               ("raw-read", raw_read), ("raw-nanosleep", raw_nanosleep), ("raw-epoll", raw_epoll),
               ("control", control)]
    for name, fn in workers:
        guarded(name, fn)
    for _ in workers:
        started.acquire()
    time.sleep(0.05)  # let the blocking threads enter their calls
    say("READY", GEN, os.getpid())
    guarded("reporter", reporter)
    while True:
        for _ in range(2000):
            counter += 1
        time.sleep(0.0002)


if __name__ == "__main__":
    main()
