"""Test target: two threads ("loop-a", "loop-b"), each running its own event
loop, each with a CPU-bound task made from the same coroutine function
(spin, tasks named "a-spin" and "b-spin") and a few idle tasks. A task's
frames have the same code in both threads: only the coroutine object tells
them apart.

Truth: each spin task, once running, records its own name
(asyncio.current_task()) and its thread's kernel TID
(threading.get_native_id()); once both have, READY, then one JSON line
per task. Each slice of spin is short (~0.2 ms) so the loops spend a good
part of their time between task steps."""
import asyncio
import json
import threading
import time

lock = threading.Lock()
seen = []


async def spin():
    me = asyncio.current_task().get_name()
    with lock:
        seen.append({"task": me, "tid": threading.get_native_id()})
    while True:
        end = time.perf_counter() + 0.0002
        x = 0
        while time.perf_counter() < end:
            x += 1
        await asyncio.sleep(0)


async def idle():
    await asyncio.sleep(3600)


async def loop_main(tag):
    tasks = [asyncio.create_task(idle(), name=f"{tag}-idle{i}") for i in range(3)]
    tasks.append(asyncio.create_task(spin(), name=f"{tag}-spin"))
    await asyncio.gather(*tasks)


for tag in ("a", "b"):
    threading.Thread(target=lambda tag=tag: asyncio.run(loop_main(tag)), name=f"loop-{tag}", daemon=True).start()
while True:
    with lock:
        if len(seen) == 2:
            break
    time.sleep(0.01)
print("READY", flush=True)
for s in seen:
    print(json.dumps(s), flush=True)
while True:
    time.sleep(3600)
