package mem

// startScript runs in the target (remoteexec globals: TOKEN, FIFO, FRAMES,
// DEADLINE_S, INTERVAL_S: the growth curve's period). It starts tracemalloc unless it is on, takes the first
// snapshot, keeps both in a sys attribute named after the token, opens the
// read end of pyobs's pipe and starts the watchdog; it prints one JSON line.
const startScript = `
import _thread, json, os, select, sys, time, tracemalloc
key = "_pyobs_mem_" + TOKEN
if getattr(sys, key, None) is not None:
    raise RuntimeError("a pyobs mem window with this token is already open")
was = tracemalloc.is_tracing()
if not was:
    tracemalloc.start(int(FRAMES))
st = {"was": was, "done": False, "lock": _thread.allocate_lock(), "curve": []}
st["snap"] = tracemalloc.take_snapshot()
st["t0"] = time.monotonic()
setattr(sys, key, st)
fd = os.open(FIFO, os.O_RDONLY | os.O_NONBLOCK)

def _pyobs_mem_watchdog(st=st, fd=fd, key=key, deadline=time.monotonic() + float(DEADLINE_S)):
    try:
        p = select.poll()
        p.register(fd, select.POLLIN | select.POLLHUP)
        while not st["done"] and time.monotonic() < deadline:
            hup = False
            for _, ev in p.poll(int(float(INTERVAL_S) * 1000)):
                if ev & select.POLLHUP:
                    hup = True
                elif ev & select.POLLIN:
                    try:
                        os.read(fd, 512)
                    except OSError:
                        pass
            if hup:
                break
            with st["lock"]:
                if not st["done"] and len(st["curve"]) < 100000:
                    st["curve"].append((time.monotonic(), tracemalloc.get_traced_memory()[0]))
    finally:
        os.close(fd)
        with st["lock"]:
            if not st["done"]:
                st["done"] = True
                st["snap"] = None
                if not st["was"]:
                    tracemalloc.stop()
                try:
                    delattr(sys, key)
                except AttributeError:
                    pass
                # pyobs is gone: remove its channel directory too.
                import shutil
                shutil.rmtree(os.path.dirname(FIFO), ignore_errors=True)

# A bare thread: not in threading.enumerate(), never joined at exit.
_thread.start_new_thread(_pyobs_mem_watchdog, ())
print(json.dumps({"was_tracing": was, "frames": tracemalloc.get_traceback_limit()}))
`

// endScript runs in the target (globals: TOKEN, TOP, MAX_SITES). It takes
// the second snapshot, stops tracemalloc unless it was on before, compares
// the snapshots by traceback with pyobs's own allocations filtered out, and
// prints one JSON object.
const endScript = `
import ast, fnmatch, json, linecache, sys, time, tracemalloc
key = "_pyobs_mem_" + TOKEN
st = getattr(sys, key, None)
if st is None:
    raise RuntimeError("the window's first snapshot is gone: the target-side watchdog ended the window (pyobs came too late)")
with st["lock"]:
    if st["done"]:
        raise RuntimeError("the window was already ended by the target-side watchdog")
    st["done"] = True
    t1 = time.monotonic()
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot()
        cur, peak = tracemalloc.get_traced_memory()
    else:
        snap = None
        cur = peak = 0
    if not st["was"]:
        tracemalloc.stop()
    delattr(sys, key)
if snap is None:
    raise RuntimeError("tracemalloc was stopped in the target during the window")
first = st["snap"]
st["snap"] = None
ours = [tracemalloc.Filter(False, tracemalloc.__file__, all_frames=True),
        tracemalloc.Filter(False, "<pyobs*", all_frames=True),
        tracemalloc.Filter(False, "<string>", lineno=1)]  # pyobs exec's one-line trampoline
first = first.filter_traces(ours)
snap = snap.filter_traces(ours)

spans = {}
def qualname(filename, lineno):
    sp = spans.get(filename)
    if sp is None:
        sp = []
        try:
            tree = ast.parse("".join(linecache.getlines(filename)))
            def walk(node, prefix):
                for ch in ast.iter_child_nodes(node):
                    if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        q = prefix + ch.name
                        sp.append((ch.lineno, ch.end_lineno or ch.lineno, q))
                        walk(ch, q + ".<locals>.")
                    elif isinstance(ch, ast.ClassDef):
                        walk(ch, prefix + ch.name + ".")
                    else:
                        walk(ch, prefix)
            walk(tree, "")
        except Exception:
            sp = False
        spans[filename] = sp
    if sp is False:
        return "?"
    best, width = "<module>", None
    for a, b, q in sp:
        if a <= lineno <= b and (width is None or b - a < width):
            best, width = q, b - a
    return best

def site(tb, size, count, size_diff=None, count_diff=None):
    frames = [{"function": qualname(f.filename, f.lineno), "file": f.filename, "line": f.lineno} for f in reversed(list(tb))]  # innermost first
    top = frames[0] if frames else {"function": "?", "file": "?", "line": 0}
    d = {"function": top["function"], "file": top["file"], "line": top["line"],
         "bytes": size, "count": count, "stack": frames}
    if size_diff is not None:
        d["bytes"], d["count"] = size_diff, count_diff
        d["bytes_end"], d["count_end"] = size, count
    return d

diff = snap.compare_to(first, "traceback")
growth = sorted((s for s in diff if s.size_diff > 0), key=lambda s: -s.size_diff)
stats = snap.statistics("traceback")
top, cap = int(TOP), int(MAX_SITES)
out = {
    "window_s": t1 - st["t0"],
    "t0": st["t0"],
    "curve": st["curve"] + [(t1, cur)],
    "was_tracing": st["was"],
    "frames": tracemalloc.get_traceback_limit() if st["was"] else None,
    "traced_bytes_end": cur, "traced_peak_bytes": peak,
    "growth_total_bytes": sum(s.size_diff for s in growth),
    "sites": len(diff),
    "growth": [site(s.traceback, s.size, s.count, s.size_diff, s.count_diff) for s in growth[:cap]],
    "by_size": [site(s.traceback, s.size, s.count) for s in sorted(stats, key=lambda s: -s.size)[:top]],
    "by_count": [site(s.traceback, s.size, s.count) for s in sorted(stats, key=lambda s: -s.count)[:top]],
}
print(json.dumps(out))
`
