"""Test target for `pyobs diagnose`: CPU-bound in one known function.

The main thread spends nearly all its time in hot_loop(); no other thread.
Prints READY, then runs until killed.
"""


def hot_loop(n):
    x = 0
    for i in range(n):
        x += i * i % 7
    return x


print("READY", flush=True)
while True:
    hot_loop(100000)
