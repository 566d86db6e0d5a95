"""Test target: two CPU-bound asyncio tasks that take turns.

"root" gathers "heavy" (burns 3 ms of CPU, then yields) and an unnamed task
running light_body (burns 1 ms, then yields; its name stays the int counter
inside the Task: nothing here asks for it). Each measures the CPU time it burned itself
(time.thread_time around each slice). After READY it prints, every 0.5 s, a
JSON line with each task's total CPU seconds so far.
"""
import asyncio
import json
import time

burned = {"heavy": 0.0, "light": 0.0}


def burn(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


async def heavy_body():
    while True:
        t0 = time.thread_time()
        burn(0.003)
        burned["heavy"] += time.thread_time() - t0
        await asyncio.sleep(0)


async def light_body():
    while True:
        t0 = time.thread_time()
        burn(0.001)
        burned["light"] += time.thread_time() - t0
        await asyncio.sleep(0)


async def reporter():
    print("READY", flush=True)
    while True:
        await asyncio.sleep(0.5)
        print(json.dumps(burned), flush=True)


async def main():
    asyncio.current_task().set_name("root")
    await asyncio.gather(
        asyncio.create_task(heavy_body(), name="heavy"),
        asyncio.create_task(light_body()),
        asyncio.create_task(reporter(), name="reporter"),
    )


asyncio.run(main())
