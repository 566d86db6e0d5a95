"""Benchmark target: a process that calls through many distinct paths.

300 functions; each call picks a random next function, so the main thread
runs random chains 3-12 deep (tens of thousands of distinct stacks over a
minute). The functions are generated (one code object each) under the file
name many_paths_gen.py.

Usage: python many_paths.py [SEED]   Prints READY and runs until killed.
"""
import random
import sys

N = 300
src = []
for i in range(N):
    src.append(
        f"def f{i}(d, r):\n"
        f"    if d == 0:\n"
        f"        x = 0\n"
        f"        for k in range({20 + i % 40}):\n"
        f"            x += k\n"
        f"        return x\n"
        f"    return F[r.randrange({N})](d - 1, r) + {i}\n"
    )
ns = {}
exec(compile("\n".join(src), __file__.replace("many_paths.py", "many_paths_gen.py"), "exec"), ns)
F = [ns[f"f{i}"] for i in range(N)]
ns["F"] = F

r = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
print("READY", flush=True)
while True:
    F[r.randrange(N)](r.randint(2, 11), r)  # a chain of 3-12 functions
