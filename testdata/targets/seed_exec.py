"""Test target: a process that execs itself, becoming a new program under
the same pid (another mapping of the same interpreter: ASLR).

Usage: python seed_exec.py MODE SECONDS OUT
MODE cpu: before_exec() burns SECONDS of this thread's CPU time; MODE
sleep: it sleeps SECONDS in 5 ms naps. Then the interpreter (sys.executable:
a pyenv build, no loader) is exec'd on this script as --after, whose
after_exec() does the same. Each program appends "ROLE PID CPU_S WALL_S"
to OUT (its own measure of the phase: the ground truth).
"""
import os
import sys
import time


def phase(mode, seconds):
    c0, w0 = time.thread_time(), time.monotonic()
    if mode == "cpu":
        x = 0
        while time.thread_time() - c0 < seconds:
            x += 1
    else:
        while time.monotonic() - w0 < seconds:
            time.sleep(0.005)
    return time.thread_time() - c0, time.monotonic() - w0


def before_exec(mode, seconds):
    return phase(mode, seconds)


def after_exec(mode, seconds):
    return phase(mode, seconds)


def report(out, role, cw):
    with open(out, "a") as f:
        f.write("%s %d %.6f %.6f\n" % (role, os.getpid(), cw[0], cw[1]))


if sys.argv[1] == "--after":
    mode, seconds, out = sys.argv[2], float(sys.argv[3]), sys.argv[4]
    report(out, "after", after_exec(mode, seconds))
    sys.exit(0)

mode, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
report(out, "before", before_exec(mode, seconds))
os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "--after", mode, sys.argv[2], out])
