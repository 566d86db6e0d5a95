"""Test target: cell and free variables. outer(captured, plain) holds a
cell variable and an argument captured by a closure; parked(), the
closure, reads them as free variables. Prints READY, then one JSON line:
{"outer": {...}, "parked": {...}}, each frame's locals() as type and
repr() (what pyobs renders), then parks in time.sleep.
"""
import json
import time

OUTER = {}


def render(ns):
    out = {}
    for name, value in ns.items():
        t = type(value).__name__
        if isinstance(value, (int, str)):
            out[name] = {"type": t, "value": repr(value)}
        else:
            out[name] = {"type": t, "value": ""}
    return out


def outer(captured, plain):
    cellv = 12345
    word = "w"

    def parked():
        own = 7
        total = cellv + captured
        line = json.dumps({"outer": OUTER, "parked": render(locals())})
        print("READY", flush=True)
        print(line, flush=True)
        time.sleep(3600)
        return own + total

    OUTER.update(render(locals()))
    parked()
    return word + str(plain)


outer(54321, 99)
