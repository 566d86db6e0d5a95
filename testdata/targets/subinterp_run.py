"""Test target: a thread of the main interpreter runs code in a
sub-interpreter (one OS thread, two thread states), 3.12+.

Usage: python subinterp_run.py spin SECONDS | sleep
Thread "subrunner" calls run_sub(), which runs the code below in a new
sub-interpreter through the low-level module's run_string (3.12/3.13) or
exec (3.14+); there in_sub() spins for SECONDS (spin) or sleeps (sleep).

Prints from inside in_sub, as it starts: READY, then "INSUB <native
thread id>"; with spin, after the spin, "SPUN <seconds of thread CPU time spent
in in_sub>"; then, from the main interpreter once run_sub returned,
"RUNNER <seconds of thread CPU time of the whole thread>". spin exits
after that; sleep parks forever.
"""
import sys
import threading
import time

try:
    import _interpreters as lowlevel  # 3.13+
except ImportError:
    import _xxsubinterpreters as lowlevel  # 3.12

SUB = """
import threading, time
def in_sub():
    print("READY", flush=True)
    print("INSUB", threading.get_native_id(), flush=True)
    spin = %(spin)r
    if spin is None:
        time.sleep(3600)
    t0 = time.thread_time()
    end = time.monotonic() + spin
    n = 0
    while time.monotonic() < end:
        n += 1
    print("SPUN", time.thread_time() - t0, flush=True)
in_sub()
"""


def run_sub(spin):
    iid = lowlevel.create()
    code = SUB % {"spin": spin}
    run = getattr(lowlevel, "run_string", None) or lowlevel.exec
    err = run(iid, code)
    if err:
        raise RuntimeError(err)
    lowlevel.destroy(iid)
    print("RUNNER", time.thread_time(), flush=True)


def main():
    spin = float(sys.argv[2]) if sys.argv[1] == "spin" else None
    t = threading.Thread(target=run_sub, args=(spin,), name="subrunner")
    t.start()
    t.join()
    if spin is None:
        time.sleep(3600)


if __name__ == "__main__":
    main()
