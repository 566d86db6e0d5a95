"""Test target for `pyobs red --slowest/--profile` with kernel samples: a
ThreadingHTTPServer (HTTP/1.1 keep-alive) on 127.0.0.1 whose slow path is
CPU work in a known function.

Usage: python red_cpu.py LOGFILE
Prints READY, then "PORT <n>", then serves until killed.

Routes:
  /slow/<id>  slow_handler -> compute: 40-60 ms of CPU (by id), 200
  /ok/<id>    fast_handler: a few µs, 200
Each request appends one line to LOGFILE when it is answered (the ground
truth): "<path> <tid> <start_mono_ns> <end_mono_ns> <handler>".
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = open(sys.argv[1], "a", buffering=1)
LOCK = threading.Lock()


def compute(ms):
    end = time.thread_time_ns() + ms * 1_000_000
    n = 0
    while time.thread_time_ns() < end:
        n += 1
    return n


def slow_handler(h, ident):
    compute(40 + ident % 21)
    h.reply(200, b"slow\n")


def fast_handler(h):
    h.reply(200, b"ok\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        t0 = time.monotonic_ns()
        p = self.path
        if p.startswith("/slow/"):
            kind = "slow_handler"
            slow_handler(self, int(p.rsplit("/", 1)[1]))
        else:
            kind = "fast_handler"
            fast_handler(self)
        with LOCK:
            LOG.write("%s %d %d %d %s\n" % (p, threading.get_native_id(), t0, time.monotonic_ns(), kind))


def main():
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("READY", flush=True)
    print("PORT", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
