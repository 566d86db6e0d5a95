"""Test target for `pyobs stat`: sleeps in short naps (off-CPU, voluntary switches).

Usage: python sleeper.py [--nap SECONDS] [--exit-after SECONDS]
Prints READY, then naps forever (or exits after --exit-after seconds).
"""
import sys
import time

args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
nap = float(opts.get("--nap", "0.005"))
end = time.monotonic() + float(opts.get("--exit-after", "3600"))
print("READY", flush=True)
while time.monotonic() < end:
    time.sleep(nap)
