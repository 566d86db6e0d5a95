"""Test target for `pyobs diagnose`: blocked reading a pipe.

A child process (not observed) writes one byte every 50 ms into a pipe;
the main thread, the only thread, reads it byte by byte in read_pipe().
Prints READY; runs until killed (the child ends when the pipe closes).
"""
import os
import subprocess
import sys

FEED = "import os, time\nwhile True:\n    os.write(1, b'x')\n    time.sleep(0.05)\n"
child = subprocess.Popen([sys.executable, "-c", FEED], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
fd = child.stdout.fileno()


def read_pipe(fd):
    return os.read(fd, 1)


print("READY", flush=True)
while read_pipe(fd):
    pass
