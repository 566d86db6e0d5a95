"""Test target: asyncio tasks created and finished at a high rate.

Usage: python asyncio_churn.py [RATE_PER_SECOND]

The main loop creates RATE tasks per second (default 1000); each awaits a
nested coroutine that sleeps a few ms and finishes. A helper thread runs its
own loop, leaves one task pending ("orphan") and exits, so that task sits in
the interpreter's list of tasks of exited threads. After READY, it prints
"rate N" once a second: the tasks that finished in that second.
"""
import asyncio
import sys
import threading
import time

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
done = 0
keep = []


async def inner(n):
    await asyncio.sleep(0.002 + (n % 5) * 0.001)


async def worker(n):
    global done
    await inner(n)
    done += 1


async def forever():
    await asyncio.Event().wait()


def helper_thread():
    loop = asyncio.new_event_loop()
    keep.append(loop)

    async def start():
        keep.append(asyncio.create_task(forever(), name="orphan"))
        await asyncio.sleep(0)

    loop.run_until_complete(start())
    # The loop is not closed and the task is still referenced: it stays
    # pending after this thread exits.


async def reporter():
    global done
    while True:
        await asyncio.sleep(1)
        print("rate", done, flush=True)
        done = 0


async def main():
    t = threading.Thread(target=helper_thread, name="helper")
    t.start()
    t.join()
    asyncio.create_task(reporter(), name="reporter")
    print("READY", flush=True)
    n = 0
    start = time.monotonic()
    while True:
        # Keep to RATE per second on average, in small batches.
        target = int((time.monotonic() - start) * RATE)
        while n < target:
            asyncio.create_task(worker(n), name=f"w{n}")
            n += 1
        await asyncio.sleep(0.001)


asyncio.run(main())
