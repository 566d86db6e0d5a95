"""Test target for `pyobs red`: a ThreadingHTTPServer (HTTP/1.1 keep-alive)
or a raw TCP echo server on 127.0.0.1, on an ephemeral port.

Usage: python red_http.py [http|echo|asyncio|reuse]
(asyncio: the same routes but /big, served by asyncio streams on one thread;
reuse: an echo server on one thread that reads a file before each accept,
so that each connection takes the number the file just had)
Prints READY, then "PORT <n>", then serves until killed.

HTTP routes (the load generator in cmd/pyobs/red_test.go picks the mix):
  /fast/<id>   200 at once (scripts/bench-red.sh)
  /ok/<id>     ~1 ms, 200
  /err/<id>    500
  /slow/<id>   200 ms in slow_handler (the stack --slowest must show), 200
  /missing/<id> 404
  /big         8 MiB in 64 KiB writes (a client resets it mid-response)
"""
import asyncio
import socket
import socketserver
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def slow_handler(h):
    time.sleep(0.2)
    h.reply(200, b"slow\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate sends

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        p = self.path
        if p.startswith("/fast/"):
            self.reply(200, b"fast\n")
        elif p.startswith("/ok/"):
            time.sleep(0.001)
            self.reply(200, b"ok\n")
        elif p.startswith("/err/"):
            self.reply(500, b"boom\n")
        elif p.startswith("/slow/"):
            slow_handler(self)
        elif p == "/big":
            chunk = b"x" * 65536
            self.send_response(200)
            self.send_header("Content-Length", str(128 * len(chunk)))
            self.end_headers()
            try:
                for _ in range(128):
                    self.wfile.write(chunk)
                    time.sleep(0.002)
            except OSError:
                self.close_connection = True
        else:
            self.reply(404, b"no\n")


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            b = self.request.recv(4096)
            if not b:
                return
            self.request.sendall(b)


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_reuse():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print("READY", flush=True)
    print("PORT", ls.getsockname()[1], flush=True)
    while True:
        with open(__file__, "rb") as f:
            f.read()
        c, _ = ls.accept()
        with c:
            while True:
                b = c.recv(4096)
                if not b:
                    break
                c.sendall(b)


async def slow_handler_async():
    await asyncio.sleep(0.2)
    return 200, b"slow\n"


async def serve_conn(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            path = line.split(b" ")[1].decode()
            code, body = 404, b"no\n"
            if path.startswith("/fast/"):
                code, body = 200, b"fast\n"
            elif path.startswith("/ok/"):
                await asyncio.sleep(0.001)
                code, body = 200, b"ok\n"
            elif path.startswith("/err/"):
                code, body = 500, b"boom\n"
            elif path.startswith("/slow/"):
                code, body = await slow_handler_async()
            reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[code]
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s" % (code, reason.encode(), len(body), body))
            await writer.drain()
    except (ConnectionError, IndexError):
        pass
    finally:
        writer.close()


async def amain():
    srv = await asyncio.start_server(serve_conn, "127.0.0.1", 0)
    print("READY", flush=True)
    print("PORT", srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "http"
    if mode == "asyncio":
        asyncio.run(amain())
        return
    if mode == "reuse":
        serve_reuse()
        return
    if mode == "echo":
        srv = EchoServer(("127.0.0.1", 0), Echo)
    else:
        ThreadingHTTPServer.daemon_threads = True
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("READY", flush=True)
    print("PORT", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
