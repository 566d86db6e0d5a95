"""Memory-bound target: one CPU-bound thread whose stack walks through
10,000 distinct Python stacks, over and over.

Ten generated functions f0..f9 call each other four deep, the path chosen by
the four decimal digits of i (0..9999): f<a> → f<b> → f<c> → f<d>. Each call
site is on its own line and the innermost spends its time on one line, so
every i is one distinct stack (10^4), all visited several times a second.
Prints "READY 10000" then runs until killed.
"""
import threading
import time

WIDTH, DEPTH = 10, 4

src = []
for k in range(WIDTH):
    src.append("def f%d(path, level):" % k)
    src.append("    if level == %d:" % (DEPTH - 1))
    src.append("        return sum(range(300))")
    src.append("    d = path[level]")
    for c in range(WIDTH):
        # one line per callee: the caller's line names the next digit
        src.append("    if d == %d: return f%d(path, level + 1)" % (c, c))
ns = {}
exec(compile("\n".join(src) + "\n", "<stacks>", "exec"), ns)
funcs = [ns["f%d" % k] for k in range(WIDTH)]
paths = [tuple(int(c) for c in "%0*d" % (DEPTH, i)) for i in range(WIDTH ** DEPTH)]


def spin():
    while True:
        for p in paths:
            funcs[p[0]](p[1:], 0)


threading.Thread(target=spin, name="spinner", daemon=True).start()
print("READY", WIDTH ** DEPTH, flush=True)
while True:
    time.sleep(3600)
