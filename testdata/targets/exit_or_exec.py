"""Target that goes away under the observer: N threads (argv[2], default
60) sleep; after READY a non-main thread waits 0-30 ms and then, as argv[1]
says, calls os._exit(0) ("exit": every thread dies at once) or execs
/bin/sleep 1 ("exec": the other threads die and the execing thread takes
the process id)."""
import os
import random
import sys
import threading
import time

mode = sys.argv[1]
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 60):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


def later():
    time.sleep(random.uniform(0, 0.03))
    if mode == "exit":
        os._exit(0)
    os.execv("/bin/sleep", ["sleep", "1"])


print("READY", flush=True)
threading.Thread(target=later).start()
time.sleep(60)
