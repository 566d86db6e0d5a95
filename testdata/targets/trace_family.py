"""Test target for `pyobs trace` over a process family: failing calls
(rmdir of a missing directory: ENOENT) from a parent, a child it forks and
a child python it runs, each from its own function.

Usage: python trace_family.py --n N --out FILE --child-argv JSON [--wait-usr1] [--reexec]
       python trace_family.py --exec-child N FILE [ROLE]
Prints READY; with --wait-usr1 waits for SIGUSR1 (sent once the tracer is
attached). Then parent_fail() makes N calls; a forked child makes N from
forked_fail(); then the interpreter --child-argv names (a JSON list: the
same command line as the parent's, loader included) runs this script as
--exec-child, which makes N from exec_fail(); with --reexec the parent
then execs that interpreter itself (same pid, a new program), which makes
N from reexec_fail(). Each process spreads its
calls over about N/10 ms and appends "ROLE PID COUNT" to FILE: its own
count, the ground truth.
"""
import json
import os
import signal
import subprocess
import sys
import time

MISSING = "/nonexistent-pyobs-trace-family/%d" % os.getpid()


def fail(n):
    done = 0
    for i in range(n):
        try:
            os.rmdir(MISSING)
        except FileNotFoundError:
            done += 1
        if i % 10 == 9:
            time.sleep(0.001)
    return done


def parent_fail(n):
    return fail(n)


def forked_fail(n):
    return fail(n)


def exec_fail(n):
    return fail(n)


def reexec_fail(n):
    return fail(n)


def report(path, role, n):
    with open(path, "a") as f:
        f.write("%s %d %d\n" % (role, os.getpid(), n))


if sys.argv[1] == "--exec-child":
    n, out = int(sys.argv[2]), sys.argv[3]
    role = sys.argv[4] if len(sys.argv) > 4 else "exec"
    report(out, role, (reexec_fail if role == "reexec" else exec_fail)(n))
    sys.exit(0)

args = sys.argv[1:]
wait_usr1 = "--wait-usr1" in args
if wait_usr1:
    args.remove("--wait-usr1")
reexec = "--reexec" in args
if reexec:
    args.remove("--reexec")
opts = dict(zip(args[::2], args[1::2]))
N, OUT = int(opts["--n"]), opts["--out"]
if wait_usr1:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("READY", flush=True)
if wait_usr1:
    signal.sigwait({signal.SIGUSR1})
report(OUT, "parent", parent_fail(N))
pid = os.fork()
if pid == 0:
    report(OUT, "forked", forked_fail(N))
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(opts["--child-argv"]) + [os.path.abspath(__file__), "--exec-child", str(N), OUT]
subprocess.run(child, check=True)
if reexec:
    os.execv(child[0], child + ["reexec"])
