"""Test target: a running asyncio task whose coroutine awaits a chain of
coroutines, each frame in its own heap object (owner GENERATOR), not on the
thread's data stack.

Usage: python asyncio_chain.py

main() gathers two tasks: "runner" runs c1(), which awaits deep(4), a
coroutine that awaits itself 4 deep; deep(0) then spins in a loop of its
own forever (the running task: its whole chain is on the thread's stack);
"waiter" awaits waiter_deep(2), which awaits itself down to an
asyncio.sleep. READY is printed from deep(0) once the waiter is parked.
"""
import asyncio
import sys

parked = []


async def waiter_deep(n):
    if n == 0:
        parked.append(1)
        await asyncio.sleep(3600)
        return 0
    return await waiter_deep(n - 1)


async def deep(n):
    if n == 0:
        while not parked:
            await asyncio.sleep(0)
        print("READY", flush=True)
        x = 0
        while True:  # the running coroutine is the innermost frame
            x += 1
    return await deep(n - 1)


async def c1():
    return await deep(4)


async def main():
    await asyncio.gather(asyncio.create_task(c1(), name="runner"),
                         asyncio.create_task(waiter_deep(2), name="waiter"))


if __name__ == "__main__":
    asyncio.run(main())
