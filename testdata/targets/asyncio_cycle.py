"""Test target: two tasks that await each other (a deadlock: an await cycle).

Prints READY once both are parked, then a JSON line {"a": id, "b": id}.
"""
import asyncio
import json

tasks = {}


async def wait_for(other):
    while other not in tasks:
        await asyncio.sleep(0.001)
    await tasks[other]


async def main():
    tasks["a"] = asyncio.create_task(wait_for("b"), name="a")
    tasks["b"] = asyncio.create_task(wait_for("a"), name="b")
    await asyncio.sleep(0.1)
    print("READY", flush=True)
    print(json.dumps({k: id(v) for k, v in tasks.items()}), flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
