"""Test target: names longer than the readers' limits.

Usage: python long_names.py
A task named "T" * 300 runs a coroutine whose name (and qualname) is "f" *
1100; it parks in asyncio.sleep. Prints READY when parked.
"""
import asyncio

NAME = "f" * 1100
ns = {"asyncio": asyncio}
exec(f"async def {NAME}(ev):\n    ev.set()\n    await asyncio.sleep(3600)\n", ns)
long_coro = ns[NAME]


async def main():
    ev = asyncio.Event()
    t = asyncio.create_task(long_coro(ev), name="T" * 300)
    await ev.wait()
    print("READY", flush=True)
    await t


if __name__ == "__main__":
    asyncio.run(main())
