"""Test target: a frame with known locals, parked in time.sleep.

Prints READY, then one JSON line with the locals' ground truth (type name
and, for the simple types pyobs renders, repr(); "len N" for containers).
"""
import json
import sys
import time


def parked():
    none = None
    yes = True
    no = False
    small = 42
    negative = -7
    big = 2**62 + 3
    huge = 2**100
    ratio = 1.5
    tiny = 1e-05
    text = "hé 處 🐍"
    raw = b"ab\x00'"
    items = [1, 2, 3]
    pair = (1, 2)
    table = {"a": 1, "b": 2}
    thing = object()
    truth = {}
    for name, value in list(locals().items()):
        if name == "truth":
            continue
        t = type(value).__name__
        if value is None or isinstance(value, (bool, float, str, bytes)) or (isinstance(value, int) and -(2**63) <= value < 2**63):
            truth[name] = {"type": t, "value": repr(value)}
        elif isinstance(value, (list, tuple, dict)):
            truth[name] = {"type": t, "value": "len %d" % len(value)}
        else:
            truth[name] = {"type": t, "value": ""}
    line = json.dumps(truth, ensure_ascii=False)
    print("READY", flush=True)
    print(line, flush=True)
    time.sleep(3600)


parked()
