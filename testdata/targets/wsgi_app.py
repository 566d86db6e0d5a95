"""A tiny WSGI app for `pyobs red` on a real gunicorn (cmd/pyobs/red_set_test.go).

Run: gunicorn -w 3 -k sync -b 127.0.0.1:PORT wsgi_app:app
(with testdata/targets on the path). Routes: /err/<id> 500, /missing/<id>
404, /slow/<id> 50 ms then 200, anything else 200; the client's own counts are the truth, per worker
too: each response names the worker that served it (X-Worker: pid).
"""
import os
import time


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path.startswith("/slow/"):
        time.sleep(0.05)
        status, body = "200 OK", b"slow\n"
    elif path.startswith("/err/"):
        status, body = "500 Internal Server Error", b"boom\n"
    elif path.startswith("/missing/"):
        status, body = "404 Not Found", b"no\n"
    else:
        status, body = "200 OK", b"ok\n"
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), ("X-Worker", str(os.getpid()))])
    return [body]
