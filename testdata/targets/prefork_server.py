"""Test target for `pyobs red` on a set: a pre-forking HTTP/1.1 server.

Usage: python prefork_server.py OUTDIR [WORKERS=3] [MAX_REQUESTS=0]

The parent binds 127.0.0.1 on an ephemeral port, listens, and forks
WORKERS workers (os.fork, no multiprocessing) that all accept on the
inherited socket. A worker serves one connection at a time, keep-alive up
to 10 requests (an idle one ends after 100 ms), then answers with
"Connection: close". With MAX_REQUESTS
> 0 a worker that served that many requests closes its connection and
exits, and the parent forks a new one (gunicorn's --max-requests).

Routes: /err/<id> 500, /missing/<id> 404, /slow/<id> 50 ms in the
worker's own slow_handler_<pid> then 200, anything else 200. Each worker
compiles that handler after its fork: its code object is in that worker's
memory only, at the address its siblings' are at (a profiler names it
through the worker's own memory, or not at all).

Ground truth: each worker writes OUTDIR/worker-<pid>.json, {"pid",
"requests", "errors" (5xx), "client4xx"}, when it exits (MAX_REQUESTS, or
SIGTERM from the parent). The parent writes OUTDIR/port ("<port> <pid>")
once the workers run; on SIGTERM it ends the workers, waits for them, and
exits 0.
"""
import json
import os
import signal
import socket
import sys
import time

KEEPALIVE = 10


def write_truth(outdir, counts):
    path = os.path.join(outdir, "worker-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as f:
        json.dump(counts, f)
    os.rename(path + ".tmp", path)


def read_request(conn, buf):
    """One request's head (bytes before the blank line) and the rest."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None, b""
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def worker(lsock, outdir, max_requests):
    counts = {"pid": os.getpid(), "requests": 0, "errors": 0, "client4xx": 0}
    name = "slow_handler_%d" % os.getpid()
    ns = {"time": time}
    exec(compile("def %s():\n    time.sleep(0.05)\n    return 200, b'OK', b'slow\\n'\n" % name, "prefork_worker.py", "exec"), ns)
    own_slow_handler = ns[name]

    def on_term(signum, frame):
        write_truth(outdir, counts)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    while True:
        conn, _ = lsock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        served = 0
        last = False
        while not last:
            # An idle keep-alive connection ends after 100 ms: a client
            # that keeps one open must not hold a worker that its other
            # connections wait for.
            conn.settimeout(None if served == 0 else 0.1)
            try:
                head, buf = read_request(conn, buf)
            except socket.timeout:
                break
            if head is None:
                break
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            if path.startswith(b"/slow/"):
                code, reason, body = own_slow_handler()
            elif path.startswith(b"/err/"):
                code, reason, body = 500, b"Internal Server Error", b"boom\n"
            elif path.startswith(b"/missing/"):
                code, reason, body = 404, b"Not Found", b"no\n"
            else:
                code, reason, body = 200, b"OK", b"ok\n"
            served += 1
            counts["requests"] += 1
            if code >= 500:
                counts["errors"] += 1
            elif code >= 400:
                counts["client4xx"] += 1
            retire = max_requests > 0 and counts["requests"] >= max_requests
            last = served >= KEEPALIVE or retire
            hdrs = b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n" % (code, reason, len(body))
            if last:
                hdrs += b"Connection: close\r\n"
            conn.sendall(hdrs + b"\r\n" + body)
        conn.close()
        if max_requests > 0 and counts["requests"] >= max_requests:
            write_truth(outdir, counts)
            os._exit(0)


def main():
    outdir = sys.argv[1]
    nworkers = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    max_requests = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(256)
    port = lsock.getsockname()[1]
    stopping = False
    workers = set()

    def spawn():
        # SIGTERM waits until the new worker is in the set (parent) and has
        # its own handler (child).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        pid = os.fork()
        if pid == 0:
            try:
                worker(lsock, outdir, max_requests)
            finally:
                os._exit(1)
        workers.add(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True
        for pid in list(workers):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    for _ in range(nworkers):
        spawn()
    with open(os.path.join(outdir, "port.tmp"), "w") as f:
        f.write("%d %d\n" % (port, os.getpid()))
    os.rename(os.path.join(outdir, "port.tmp"), os.path.join(outdir, "port"))
    print("READY", flush=True)
    while workers:
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            break
        workers.discard(pid)
        if not stopping:
            spawn()
    sys.exit(0)


if __name__ == "__main__":
    main()
