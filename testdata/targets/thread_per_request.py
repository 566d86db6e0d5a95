"""Test target: a thread-per-request HTTP server (ThreadingHTTPServer, HTTP/1.0:
one connection, one request, one thread) whose handler burns CPU.

Usage: python thread_per_request.py [ITERATIONS]   (default 100000 per request: ~5-10 ms of CPU)
Listens on 127.0.0.1, prints READY and then its port, serves until killed. The CPU goes
to Handler.do_GET's own loop (the test checks it is on top of the samples).
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100000


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        x = 0
        for i in range(N):
            x += i * i
        body = str(x).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
print("READY", flush=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
