"""A small program with the shapes pyobs is for: a CPU-bound worker, a thread
waiting on a lock, one sleeping, and a main thread waiting for them."""
import threading
import time

lock = threading.Lock()


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def crunch():
    while True:
        fib(22)


def hold_lock():
    with lock:
        time.sleep(3600)


def want_lock():
    time.sleep(0.05)
    with lock:
        pass


def nap():
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    workers = [
        threading.Thread(target=crunch, name="cruncher", daemon=True),
        threading.Thread(target=hold_lock, name="lock-holder", daemon=True),
        threading.Thread(target=want_lock, name="lock-waiter", daemon=True),
        threading.Thread(target=nap, name="napper", daemon=True),
    ]
    for w in workers:
        w.start()
    workers[2].join()
