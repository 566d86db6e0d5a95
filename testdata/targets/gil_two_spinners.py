"""Test target: two GIL-bound threads ("spin-a", "spin-b": pure Python
arithmetic, no call that releases the GIL) and one thread ("held-sleep")
that sleeps while holding the GIL (usleep called through ctypes.PyDLL,
which does not release it): 20 ms asleep in nanosleep holding it, then
20 ms asleep in select() without it.

By construction a spinner holds the GIL only while it runs (or waits for a
CPU): whenever the kernel shows it asleep it is waiting for the GIL (or for
the one that dropped it to be taken). held-sleep holds it whenever it is
asleep in nanosleep (or in restart_syscall: the same sleep, resumed after
a ptrace stop interrupted it), never in select() or futex. The main
thread sleeps in time.sleep. READY is printed once all three have started,
then each thread's name and kernel TID as JSON lines."""
import ctypes
import json
import select
import threading
import time

libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held during the call
libc.usleep.argtypes = [ctypes.c_uint]
started = []
lock = threading.Lock()


def hello():
    with lock:
        started.append({"name": threading.current_thread().name, "tid": threading.get_native_id()})


def spin():
    hello()
    x = 0
    while True:
        x += 1


def held_sleep():
    hello()
    while True:
        libc.usleep(20000)
        select.select([], [], [], 0.02)


for name, fn in (("spin-a", spin), ("spin-b", spin), ("held-sleep", held_sleep)):
    threading.Thread(target=fn, name=name, daemon=True).start()
while True:
    with lock:
        if len(started) == 3:
            break
    time.sleep(0.01)
print("READY", flush=True)
for s in started:
    print(json.dumps(s), flush=True)
while True:
    time.sleep(3600)
