"""Test target: a known asyncio task tree; reports its own view of it.

Usage: python asyncio_tree.py [EXTRA_PENDING]

Tree: "root" gathers three named tasks: "sleeper" awaits a nested task
"nested" that sleeps; "stuck" awaits an Event that is never set; "cpu" is
CPU-bound in a sync call (the running task). One more task is left unnamed
(its name stays the int counter inside the Task). Two more, a finished
and a cancelled one, stay referenced (kept): done, they are not in
asyncio.all_tasks(), nor in the tree. EXTRA_PENDING adds that many more
pending tasks (for the benchmark).

When everything is parked, the cpu task prints READY and then one JSON line:
every task (asyncio.all_tasks()) with its name, its coroutine chain (the
task's coroutine, then cr_await while it is a coroutine: qualname and line,
outermost first) and its awaiters (3.14+: asyncio.capture_call_graph;
before: the tasks whose _fut_waiter is it or a gather() holding it);
then it spins in a sync function forever.
"""
import asyncio
import json
import os
import sys
import types

EXTRA = int(sys.argv[1]) if len(sys.argv) > 1 else 0
started = []


async def nested_sleep():
    started.append("nested")
    await asyncio.sleep(3600)


async def sleeper_body():
    t = asyncio.create_task(nested_sleep(), name="nested")
    await t


async def stuck_body(ev):
    started.append("stuck")
    await ev.wait()


async def anonymous_body():
    started.append("anon")
    await asyncio.sleep(3600)


async def extra_body(ev):
    await ev.wait()


def chain(coro):
    out = []
    seen = set()
    while isinstance(coro, types.CoroutineType) and id(coro) not in seen:
        seen.add(id(coro))
        f = coro.cr_frame
        if f is None:
            break
        out.append({"function": coro.cr_code.co_qualname, "line": f.f_lineno, "id": id(coro)})
        coro = coro.cr_await
    return out


def awaiters_before_314(task):
    """Before 3.14 no awaiter links exist: the tasks whose _fut_waiter (the
    future their step waits on) is this task, or a gather() future that has
    this task among its children."""
    out = []
    for a in asyncio.all_tasks():
        w = a._fut_waiter
        if w is task or (type(w).__name__ == "_GatheringFuture" and any(c is task for c in w._children)):
            out.append(a)
    return out


def report():
    me = asyncio.current_task()
    tasks = []
    for t in asyncio.all_tasks():
        if t.get_coro().cr_code.co_name == "extra_body":
            continue
        named = t.get_coro().cr_code.co_name != "anonymous_body"
        entry = {"id": id(t), "name": t.get_name() if named else None,
                 "coro": chain(t.get_coro()), "running": t is me}
        if hasattr(asyncio, "capture_call_graph"):
            g = asyncio.capture_call_graph(t, limit=0)
            entry["awaited_by"] = sorted(id(a.future) for a in g.awaited_by) if g else []
        else:
            entry["awaited_by"] = sorted(id(a) for a in awaiters_before_314(t))
        tasks.append(entry)
    print("READY", flush=True)
    print(json.dumps({"pid": os.getpid(), "version": sys.version, "tasks": tasks}), flush=True)


def spin(report_first):
    report_first()
    x = 0
    while True:
        x += 1


async def cpu_body():
    while len(started) < 3:
        await asyncio.sleep(0.01)
    spin(report)


kept = []


async def quick():
    return 1


async def main():
    asyncio.current_task().set_name("root")
    done = asyncio.create_task(quick(), name="done-kept")
    await done
    cancelled = asyncio.create_task(asyncio.sleep(3600), name="cancelled-kept")
    await asyncio.sleep(0)
    cancelled.cancel()
    try:
        await cancelled
    except asyncio.CancelledError:
        pass
    kept.extend([done, cancelled])
    ev = asyncio.Event()
    asyncio.create_task(anonymous_body())
    for _ in range(EXTRA):
        asyncio.create_task(extra_body(ev))
    await asyncio.gather(
        asyncio.create_task(sleeper_body(), name="sleeper"),
        asyncio.create_task(stuck_body(ev), name="stuck"),
        asyncio.create_task(cpu_body(), name="cpu"),
    )


asyncio.run(main())
