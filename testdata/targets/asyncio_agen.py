"""Test target: asyncio tasks iterating async generators, parked inside the
generators' own awaits.

Usage: python asyncio_agen.py

Tasks (each parks in asyncio.sleep inside an async generator):
  "one":    consume_one() does `async for` over ticker(), which awaits
            sleep: chain consume_one → ticker → sleep.
  "two":    consume_two() does `async for` over outer_agen(), which does
            `async for` over ticker(): consume_two → outer_agen → ticker → sleep.
  "anext":  the task's coroutine is ticker().__anext__() itself (an
            async_generator_asend): chain ticker → sleep.
  "aclose": closer() starts slow_close(), then awaits its aclose() mid
            iteration; slow_close's finally block awaits sleep: the task's
            coroutine chain is closer → slow_close → sleep.
READY once all four are parked; then the main task sleeps.
"""
import asyncio

parked = set()


async def ticker(name):
    while True:
        parked.add(name)
        await asyncio.sleep(3600)
        yield 1


async def outer_agen(name):
    async for x in ticker(name):
        yield x


async def consume_one():
    async for _ in ticker("one"):
        pass


async def consume_two():
    async for _ in outer_agen("two"):
        pass


async def slow_close():
    try:
        yield 1
        yield 2
    finally:
        parked.add("aclose")
        await asyncio.sleep(3600)


async def closer():
    g = slow_close()
    await g.__anext__()
    await g.aclose()


async def main():
    tasks = [asyncio.create_task(consume_one(), name="one"),
             asyncio.create_task(consume_two(), name="two"),
             asyncio.create_task(ticker("anext").__anext__(), name="anext"),
             asyncio.create_task(closer(), name="aclose")]
    while len(parked) < 4:
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await asyncio.sleep(3600)
    del tasks


if __name__ == "__main__":
    asyncio.run(main())
