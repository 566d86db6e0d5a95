"""Test target: measures, with ctypes, where this interpreter keeps the
asyncio fields pyobs reads on 3.12/3.13, by finding known objects' addresses
inside a live Task, coroutine, frame, set, weakref and type.

Prints one JSON line (offsets in bytes, -1 when not found) and exits.
"""
import asyncio
import ctypes
import json
import opcode
import sys
import weakref

P = ctypes.c_void_p


def find(obj, target, n=48):
    for i in range(n):
        if (P.from_address(id(obj) + 8 * i).value or 0) == id(target):
            return 8 * i
    return -1


def i8(addr):
    return ctypes.c_int8.from_address(addr).value


async def inner(ev):
    await ev.wait()


async def outer(ev):
    await inner(ev)


states = {}


def header(coro, n):
    return bytes((ctypes.c_uint8 * n).from_address(id(coro)))


async def note_executing():
    states["executing_header"] = header(asyncio.current_task().get_coro(), out["gen_iframe"])


out = {}


async def main():
    ev = asyncio.Event()
    t = asyncio.create_task(outer(ev), name="probe")
    await asyncio.sleep(0.01)
    c = t.get_coro()
    out["task_size"] = type(t).__basicsize__
    out["task_fut_waiter"] = find(t, t._fut_waiter)
    out["task_coro"] = find(t, c)
    out["task_name"] = find(t, t.get_name())
    # The embedded frame starts with its code object.
    out["gen_iframe"] = n = find(c, c.cr_code)
    # The frame state: the one header byte that differs between a created,
    # a suspended and an executing coroutine, 0 while executing.
    fresh = outer(ev)
    created, suspended = header(fresh, n), header(c, n)
    fresh.close()
    await asyncio.create_task(note_executing())
    executing = states.pop("executing_header")
    out["gen_frame_state"] = -1
    for off in range(16, n):
        if executing[off] == 0 and len({created[off], suspended[off], 0}) == 3:
            out["gen_frame_state"] = off
            states["created"] = ctypes.c_int8(created[off]).value
            states["suspended_await"] = ctypes.c_int8(suspended[off]).value
            states["executing"] = 0
            break
    out["states"] = states
    # stacktop: an int in the frame whose localsplus[stacktop-1] is cr_await.
    fr = id(c) + out["gen_iframe"]
    out["frame_stacktop"] = -1
    for off in range(8, 72, 4):
        top = ctypes.c_int32.from_address(fr + off).value
        if 0 < top < 64 and P.from_address(fr + 72 + 8 * (top - 1)).value == id(c.cr_await):
            out["frame_stacktop"] = off
            break
    s = {1, 2, 3, 4}
    s.discard(4)  # fill 4, used 3
    words = [P.from_address(id(s) + 8 * i).value or 0 for i in range(8)]
    out["set_used"] = 8 * words.index(3, 2) if 3 in words[2:] else -1
    out["set_fill"] = 8 * words.index(4, 2) if 4 in words[2:] else -1
    out["set_mask"] = 8 * words.index(7) if 7 in words else -1
    out["set_table"] = out["set_mask"] + 8  # checked below: table's first keys are the ints
    table = words[out["set_table"] // 8]
    keys = {P.from_address(table + 16 * i).value for i in range(8)}
    if not {id(1), id(2), id(3)} <= keys:
        out["set_table"] = -1
    r = weakref.ref(t)
    out["weakref_object"] = find(r, t, 4)
    out["type_base"] = find(type(t), type(t).__base__, 64)
    out["resume"] = [opcode.opmap.get("RESUME", -1), opcode.opmap.get("INSTRUMENTED_RESUME", -1)]
    # The future's state (an int): PENDING 0 (t), CANCELLED 1, FINISHED 2.
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    cancelled = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    cancelled.cancel()
    try:
        await cancelled
    except asyncio.CancelledError:
        pass
    out["fut_state"] = -1
    for off in range(16, out["task_fut_waiter"], 4):
        st = [ctypes.c_int32.from_address(id(x) + off).value for x in (t, cancelled, done)]
        if st == [0, 1, 2]:
            out["fut_state"] = off
            break
    ev.set()
    await t


asyncio.run(main())
print(json.dumps(out), flush=True)
