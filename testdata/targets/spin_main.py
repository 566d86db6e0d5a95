"""Test target: CPU-bound in its only thread, never blocking: all its
off-CPU time is run-queue (preempted). Prints READY, then burns forever."""


def burn(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


print("READY", flush=True)
while True:
    burn(100000)
