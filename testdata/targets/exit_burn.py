"""Test target: burns CPU for a while, then exits (the achieved rate's truth).

Usage: python exit_burn.py SECONDS [wait]
Prints READY; with "wait", then reads one line from stdin before it burns
(so that a recorder attached with -p sees the whole burn). Burns SECONDS of
its own CPU time (time.process_time), prints "cpu START END" (its
process_time before and after the burn) and exits.
"""
import sys
import time

print("READY", flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "wait":
    sys.stdin.readline()
start = time.process_time()
end = start + float(sys.argv[1])
while time.process_time() < end:
    pass
print("cpu", start, time.process_time(), flush=True)
