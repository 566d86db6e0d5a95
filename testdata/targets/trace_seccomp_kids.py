"""Test target for `pyobs trace --engine ptrace -e newfstatat -- CMD`: the
seccomp filter of -e passes to every process CMD starts.

Usage: python trace_seccomp_kids.py wait N REPORT
       python trace_seccomp_kids.py leave N REPORT DELAY
       (internal) python trace_seccomp_kids.py child N REPORT DELAY

wait: the parent makes N failing os.stat calls itself, then starts a child
python through subprocess (vfork and exec) and a forked copy of itself
(os.fork, no exec); each makes N failing os.stat calls and says how they
failed. The parent waits for both and exits 0.
leave: the parent starts the child python, does not wait for it, and exits
3 at once; the child sleeps DELAY seconds first.

Each process appends "ROLE pid ENOENT=a other=b" to REPORT: a call that
failed otherwise than ENOENT (ENOSYS: a filtered call without a tracer)
counts as other.
"""
import errno
import os
import subprocess
import sys
import time

mode, N, REPORT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
missing = "/nonexistent/pyobs-kids-%d" % os.getpid()


def stats(role):
    enoent = other = 0
    for _ in range(N):
        try:
            os.stat(missing)
        except OSError as e:
            if e.errno == errno.ENOENT:
                enoent += 1
            else:
                other += 1
    with open(REPORT, "a") as f:
        f.write("%s %d ENOENT=%d other=%d\n" % (role, os.getpid(), enoent, other))


if mode == "child":
    time.sleep(float(sys.argv[4]))
    stats("child")
    sys.exit(0)

child = [sys.executable, __file__, "child", str(N), REPORT]
if mode == "leave":
    subprocess.Popen(child + [sys.argv[4]])
    sys.exit(3)

stats("parent")
rc = subprocess.run(child + ["0"]).returncode
pid = os.fork()
if pid == 0:
    stats("fork")
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("CHILD %d FORK %d" % (rc, os.waitstatus_to_exitcode(status)), flush=True)
sys.exit(0)
