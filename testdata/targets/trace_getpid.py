"""Benchmark target: N os.getpid() calls; prints "ELAPSED seconds" of the loop.

Usage: python trace_getpid.py [N] [--wait-go]
"""
import os
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200000
print("READY", flush=True)
if "--wait-go" in sys.argv:
    sys.stdin.readline()
t = time.perf_counter()
for _ in range(n):
    os.getpid()
print("ELAPSED %.6f" % (time.perf_counter() - t), flush=True)
