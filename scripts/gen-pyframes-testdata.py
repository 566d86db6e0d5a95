#!/usr/bin/env python3
"""Write the golden files of internal/pyframes from real CPython interpreters.

Usage:
  scripts/gen-pyframes-testdata.py [--manifest TSV] [--out DIR]
      Driver (any python3): for each minor in the interpreter manifest written
      by scripts/pythons.sh (default $PYOBS_PYTHONS_CACHE/interpreters.tsv or
      /var/cache/pyobs-pythons/interpreters.tsv), run this script under that
      interpreter's full argv (sid ones go through their private loader) in
      --emit mode. The first line of a minor wins (pyenv before debian).
  <python> scripts/gen-pyframes-testdata.py --emit DIR --label LABEL
      Emit mode: runs inside the interpreter being described.

Files written into DIR (default testdata/pyframes, relative to the repo):
  linetable-3.X.json
      Every code object (recursively through co_consts) of a fixed set of
      source snippets: co_firstlineno, co_linetable as hex, and the line of
      every code unit as the interpreter itself answers it, through
      PyCode_Addr2Line(code, 2*unit) (called with ctypes; the function the
      interpreter uses for frame.f_lineno). null means "no line" (-1). The
      answer is cross-checked here against co_positions() (3.11+: one tuple
      per code unit, CACHE entries included) and co_lines() (byte ranges);
      the script fails if the three disagree. The decoder under test is never
      involved.
  unicode-3.X.json
      For a fixed list of texts, fresh compact str objects: the code points,
      PyASCIIObject.state's low byte, the kind (by the largest code point),
      where the data starts (found by searching the object for the encoded
      text) and the data's bytes as hex.
  debug-offsets-3.X.bin           (3.13+)
      The first DebugTableSize(minor) bytes of this process's _PyRuntime
      (the _Py_DebugOffsets table), read with ctypes.string_at.
  debug-offsets-3.X.facts.json    (3.13+)
      Facts found WITHOUT the table, by scanning live objects for values we
      know (threading.get_native_id() inside PyThreadState, id(co_filename)
      inside a code object, ...): for each fact, the sorted list of offsets
      where the value was found ("candidates"), or a plain number (a size
      from __basicsize__ / sys.getsizeof). The Go tests check that the
      table's fields are among the candidates.

Output is deterministic (no dates, no addresses): rerunning on the same
interpreters rewrites identical files.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Bytes of _Py_DebugOffsets per minor (internal/pyframes DebugTableSize).
DEBUG_TABLE_SIZE = {13: 584, 14: 760, 15: 888}


# --------------------------------------------------------------------------
# Snippets: (name, minimum minor, source). Each must compile on every minor
# from its minimum up. Together they exercise every location-table entry
# kind: short forms (codes 0-9), one-line forms (10-12), no-column (13), long
# form (14, multi-line spans, columns > 255), no-location (15); signed
# varint line deltas of 1, 2, 3 and 4 chunks, positive and negative; entries
# longer than 8 code units (split); and on 3.10 line deltas > 127 and byte
# deltas > 254 (split pairs, 0-width ranges), and -128 "no line" pairs.
# --------------------------------------------------------------------------

def _long_function(n):
    body = "".join("    v%d = a + %d\n" % (i, i) for i in range(n))
    return "def long_function(a):\n" + body + "    return v0\n"


def _wide_lines():
    # Columns past 255 need the long form; a one-line expression with a huge
    # amount of bytecode gives 3.10 byte deltas > 254.
    terms = " + ".join("x%d" % i for i in range(160))
    params = ", ".join("x%d=%d" % (i, i) for i in range(160))
    return (
        "def wide(%s):\n"
        "    total = %s\n"
        "    return total\n" % (params, terms)
    )


def _gaps():
    # Statements 65, 200, 3000 and 140000 lines apart: svarint deltas of
    # 2, 3 and 4 chunks (zigzag 6 bits per chunk), and on 3.10 line deltas
    # far beyond +-127.
    return (
        "def gaps(a):\n"
        "    x = a\n"
        + "\n" * 65
        + "    y = x + 1\n"
        + "\n" * 200
        + "    z = y + 1\n"
        + "\n" * 3000
        + "    w = z + 1\n"
        + "\n" * 140000
        + "    return w\n"
    )


def _negative():
    # The call instruction's location starts at the line of `f(`, thousands
    # of lines before the last argument: large negative deltas.
    return (
        "def negative(f, a, b):\n"
        "    r = f(\n"
        "        a,\n"
        + "\n" * 100
        + "        b,\n"
        + "\n" * 3000
        + "        a)\n"
        "    s = f(\n"
        + "\n" * 70
        + "        b)\n"
        "    return r, s\n"
    )


def _far_first_line():
    # A function whose co_firstlineno is far down the file: the module's
    # table jumps tens of thousands of lines.
    return "x = 1\n" + "\n" * 140000 + "def far(a):\n    return a + 1\n" + "y = far(x)\n"


SNIPPETS = [
    ("simple", 10, """\
def simple(a, b):
    x = a + b
    return x
"""),
    ("multiline_expressions", 10, """\
def multi(a, b, c, call):
    x = (a +
         b *
         c)
    y = [
        a,
        b,
        c,
    ]
    z = {
        'a': a,
        'b': (b
              if a else
              c),
    }
    return call(
        x,
        y,
        z,
    ).attr[
        0
    ]
"""),
    ("loops", 10, """\
def loops(n, items):
    total = 0
    for i in range(n):
        if i % 2:
            continue
        total += i
        if total > 100:
            break
    else:
        total = -1
    while n > 0:
        n -= 1
        for x in items:
            for y in items:
                total += x * y
    return total
"""),
    ("try_except", 10, """\
def try_except(f, g):
    try:
        f()
    except ValueError as e:
        g(e)
    except (TypeError, KeyError):
        pass
    else:
        g(None)
    finally:
        g(0)
    try:
        try:
            f()
        finally:
            g(1)
    except Exception as exc:
        raise RuntimeError("wrapped") from exc
"""),
    ("comprehensions", 10, """\
def comps(items):
    a = [x * 2 for x in items if x]
    b = {x: y for x in items
              for y in items
              if x != y}
    c = {x for x in items}
    d = (x + 1 for x in items)
    e = [[y for y in range(x)] for x in items]
    return a, b, c, list(d), e
"""),
    ("lambdas_closures", 10, """\
def closures(n):
    k = n
    f = lambda x: x + k
    g = (lambda x,
                y:
         x * y)
    def inner(y):
        nonlocal k
        k += y
        def innermost():
            return k
        return innermost
    return f, g, inner
"""),
    ("decorators_classes", 10, """\
def deco(f):
    return f

def deco_args(*args):
    return deco

@deco
@deco_args(
    1,
    2,
)
def decorated(a):
    return a

@deco
class Klass(object):
    attr = 1

    def __init__(self, v):
        self.v = v

    @property
    def prop(self):
        return self.v

    @staticmethod
    def static(a,
               b):
        return a + b

    class Nested:
        def method(self):
            return super().__class__
"""),
    ("generators_async", 10, """\
def gen(items):
    for x in items:
        yield x
    yield from items
    return len(items)

async def coro(aw, aiter_, actx):
    r = await aw
    async for x in aiter_:
        r += x
    async with actx as c:
        r += c
    return [y async for y in aiter_]

async def agen(n):
    for i in range(n):
        yield i
"""),
    ("with_statements", 10, """\
def withs(cm, cm2, f):
    with cm:
        f()
    with cm as a, cm2 as b:
        f(a, b)
    with (cm as c,
          cm2 as d):
        f(c, d)
    return f
"""),
    ("match", 10, """\
def matching(v):
    match v:
        case 0:
            return "zero"
        case [a, b, *rest]:
            return a
        case {"k": x, **kw}:
            return x
        case str() | bytes():
            return "text"
        case Point(x=0, y=yy) if yy > 0:
            return yy
        case _:
            return None
"""),
    ("misc_statements", 10, """\
import os as _os
from os import path as _path

G = 1

def misc(a, b, *args, c=3, **kw):
    global G
    assert a, (
        "message"
    )
    del b
    a += 1
    a @= 2 if a else 3
    ok = 1 < a <= 3 != c
    s = f"{a!r:>{c}} and {
        kw
    }" if False else f"{a}"
    if (n := len(args)) > 1:
        G = n
    x = (yield) if False else None
    return ok, s, x
"""),
    ("docstring_first", 10, '''\
def documented(a):
    """A docstring
    that spans
    several
    lines.
    """
    return a
'''),
    ("empty_bodies", 10, """\
def empty():
    pass

def ellipsis():
    ...

def only_return():
    return

class Empty:
    pass
"""),
    ("long_function", 10, _long_function(400)),
    ("wide_lines", 10, _wide_lines()),
    ("line_gaps", 10, _gaps()),
    ("negative_deltas", 10, _negative()),
    ("far_first_line", 10, _far_first_line()),
    ("except_star", 11, """\
def star(f, g):
    try:
        f()
    except* ValueError as eg:
        g(eg)
    except* TypeError:
        g(None)
"""),
    ("type_params", 12, """\
type Alias[T] = list[T]

def generic[T: int, *Ts, **P](x: T) -> T:
    return x

class Box[T]:
    def get(self) -> T:
        return self.v
"""),
]

# 3.10 cannot parse a multi-line f-string replacement field (PEP 701 is 3.12).
_FSTRING_OLD = '''    s = f"{a!r:>{c}} and {kw}" if False else f"{a}"\n'''


def _snippet_source(name, src, minor):
    if name == "misc_statements" and minor < 12:
        lines = src.split("\n")
        start = next(i for i, l in enumerate(lines) if l.startswith('    s = f"'))
        end = next(i for i in range(start, len(lines)) if lines[i].endswith('f"{a}"'))
        lines[start:end + 1] = [_FSTRING_OLD.rstrip("\n")]
        src = "\n".join(lines)
    return src


# --------------------------------------------------------------------------
# Emit mode: inside the interpreter being described.
# --------------------------------------------------------------------------

def _walk_codes(code, path):
    yield path, code
    for c in code.co_consts:
        if isinstance(c, type(code)):
            yield from _walk_codes(c, path + "/" + getattr(c, "co_qualname", c.co_name))


def _lines_from_co_lines(code, nunits):
    out = [None] * nunits
    for start, end, line in code.co_lines():
        for b in range(start, end, 2):
            out[b // 2] = line
    return out


def _describe_code(ctypes, addr2line, code, minor):
    nbytes = len(code.co_code)
    nunits = nbytes // 2
    lines = []
    for u in range(nunits):
        ln = addr2line(ctypes.py_object(code), 2 * u)
        lines.append(None if ln < 0 else ln)
    by_lines = _lines_from_co_lines(code, nunits)
    if by_lines != lines:
        raise SystemExit("%s: PyCode_Addr2Line and co_lines() disagree:\n%r\n%r" % (code, lines, by_lines))
    if minor >= 11:
        pos = [p[0] for p in code.co_positions()]
        if pos != lines:
            raise SystemExit("%s: PyCode_Addr2Line and co_positions() disagree:\n%r\n%r" % (code, lines, pos))
    neg = addr2line(ctypes.py_object(code), -2)
    return {
        "firstlineno": code.co_firstlineno,
        "linetable": code.co_linetable.hex(),
        "code_units": nunits,
        "lines": lines,
        "line_before_first": neg,  # PyCode_Addr2Line(code, -2)
    }


def emit_linetables(out, label):
    import ctypes
    import warnings

    minor = sys.version_info[1]
    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
    addr2line.restype = ctypes.c_int
    codes = []
    stats = {"units": 0, "no_line_units": 0}
    for name, since, src in SNIPPETS:
        if minor < since:
            continue
        src = _snippet_source(name, src, minor)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            top = compile(src, name + ".py", "exec", dont_inherit=True)
        for path, code in _walk_codes(top, name):
            d = _describe_code(ctypes, addr2line, code, minor)
            d["name"] = path
            codes.append(d)
            stats["units"] += d["code_units"]
            stats["no_line_units"] += sum(1 for x in d["lines"] if x is None)
    doc = {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "label": label,
        "truth": "PyCode_Addr2Line(code, 2*unit) via ctypes; equal to co_lines()"
        + (" and co_positions()" if minor >= 11 else ""),
        "units": "code units (2 bytes); 3.10 tables are indexed by byte offset 2*unit",
        "codes": codes,
    }
    path = os.path.join(out, "linetable-3.%d.json" % minor)
    _write_json(path, doc)
    sys.stderr.write("%s: %d code objects, %d units (%d with no line)\n"
                     % (path, len(codes), stats["units"], stats["no_line_units"]))


def _write_json(path, doc):
    # One code object per line: diffs stay readable, files stay compact.
    with open(path, "w") as f:
        f.write("{\n")
        keys = sorted(k for k in doc if k != "codes" and k != "facts")
        for k in keys:
            f.write("  %s: %s,\n" % (json.dumps(k), json.dumps(doc[k], sort_keys=True)))
        big = "codes" if "codes" in doc else "facts"
        f.write("  %s: [\n" % json.dumps(big))
        items = doc[big]
        for i, c in enumerate(items):
            f.write("    " + json.dumps(c, sort_keys=True, separators=(",", ":")))
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("  ]\n}\n")


def _scan(ctypes, base, size, value, width=8, mask=0):
    """Offsets o in [0, size) (aligned to width) where the integer at base+o equals value."""
    raw = ctypes.string_at(base, size)
    out = []
    for o in range(0, size - width + 1, width):
        v = int.from_bytes(raw[o:o + width], "little")
        if v & ~mask == value & ~mask:
            out.append(o)
    return out


def _readable_ranges():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].startswith("r"):
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out


def _readable(ranges, addr, n):
    return any(lo <= addr and addr + n <= hi for lo, hi in ranges)


def _scan_bytes(ctypes, base, size, needle):
    raw = ctypes.string_at(base, size)
    out, i = [], raw.find(needle)
    while i >= 0:
        out.append(i)
        i = raw.find(needle, i + 1)
    return out


def emit_debug_offsets(out, label):
    import ctypes
    import struct
    import threading
    import builtins

    minor = sys.version_info[1]
    n = DEBUG_TABLE_SIZE[minor]
    api = ctypes.pythonapi
    runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
    table = ctypes.string_at(runtime, n)
    with open(os.path.join(out, "debug-offsets-3.%d.bin" % minor), "wb") as f:
        f.write(table)

    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    main_ts = api.PyThreadState_Get()
    interp = api.PyInterpreterState_Get()
    facts = []

    def cand(name, offsets, how):
        facts.append({"fact": name, "candidates": offsets, "how": how})

    def exact(name, value, how):
        facts.append({"fact": name, "value": value, "how": how})

    exact("version", sys.hexversion, "sys.hexversion")
    TS_SCAN, INTERP_SCAN, RT_SCAN = 1024, 65536, 8192

    # A second thread, parked while we look: it is the newest thread state,
    # so the interpreter's list head, and its next is the main thread's.
    box, parked, release = {}, threading.Event(), threading.Event()

    def worker():
        box["ts"] = api.PyThreadState_Get()
        box["ident"] = threading.get_ident()
        box["native"] = threading.get_native_id()
        parked.set()
        release.wait()

    th = threading.Thread(target=worker)
    th.start()
    parked.wait()
    try:
        ts2 = box["ts"]
        cand("runtime_state.interpreters_head", _scan(ctypes, runtime, RT_SCAN, interp),
             "offsets in _PyRuntime holding PyInterpreterState_Get()")
        cand("thread_state.thread_id", _scan(ctypes, main_ts, TS_SCAN, threading.get_ident()),
             "offsets in PyThreadState_Get() holding threading.get_ident()")
        cand("thread_state.thread_id#2", _scan(ctypes, ts2, TS_SCAN, box["ident"]),
             "same, in a second thread")
        cand("thread_state.native_thread_id", _scan(ctypes, main_ts, TS_SCAN, threading.get_native_id()),
             "offsets in PyThreadState_Get() holding threading.get_native_id()")
        cand("thread_state.native_thread_id#2", _scan(ctypes, ts2, TS_SCAN, box["native"]),
             "same, in a second thread")
        cand("thread_state.interp", _scan(ctypes, main_ts, TS_SCAN, interp),
             "offsets in PyThreadState_Get() holding PyInterpreterState_Get()")
        cand("thread_state.next", _scan(ctypes, ts2, TS_SCAN, main_ts),
             "offsets in the newer thread's state holding the main thread's state")
        cand("thread_state.prev", _scan(ctypes, main_ts, TS_SCAN, ts2),
             "offsets in the main thread's state holding the newer thread's state")
        cand("interpreter_state.threads_head", _scan(ctypes, interp, INTERP_SCAN, ts2),
             "offsets in the interpreter holding the newest thread state")
        cand("interpreter_state.threads_main", _scan(ctypes, interp, INTERP_SCAN, main_ts),
             "offsets in the interpreter holding the main thread's state")
        cand("interpreter_state.gil_runtime_state_holder", _scan(ctypes, interp, INTERP_SCAN, main_ts),
             "offsets in the interpreter holding the main thread's state (it holds the GIL now)")
    finally:
        release.set()
        th.join()

    cand("interpreter_state.imports_modules", _scan(ctypes, interp, INTERP_SCAN, id(sys.modules)),
         "offsets in the interpreter holding id(sys.modules)")
    cand("interpreter_state.sysdict", _scan(ctypes, interp, INTERP_SCAN, id(sys.__dict__)),
         "offsets in the interpreter holding id(sys.__dict__)")
    cand("interpreter_state.builtins", _scan(ctypes, interp, INTERP_SCAN, id(builtins.__dict__)),
         "offsets in the interpreter holding id(builtins.__dict__)")
    # ceval.gil points at the interpreter's own _gil struct (own-GIL main
    # interpreter): pairs (pointer offset, target offset) for pointers into
    # the interpreter itself.
    raw = ctypes.string_at(interp, INTERP_SCAN)
    selfptr = []
    for o in range(0, INTERP_SCAN, 8):
        v = int.from_bytes(raw[o:o + 8], "little")
        if interp < v < interp + INTERP_SCAN:
            selfptr.append([o, v - interp])
    facts.append({"fact": "interpreter_state.self_pointers", "pairs": selfptr,
                  "how": "[offset, target-interp] for words in the interpreter pointing into itself"})

    # Objects.
    exact("pyobject.ob_type", _scan(ctypes, id(1.5), 32, id(float))[0], "offset in a float holding id(float)")

    def f(alpha, beta, gamma, delta, epsilon, zeta, eta):
        return alpha
    code = f.__code__
    csize = type(code).__basicsize__
    exact("code_object.co_code_adaptive#basicsize", csize,
          "type(code).__basicsize__ (PyCode_Type's tp_basicsize is offsetof(PyCodeObject, co_code_adaptive))")
    cspan = csize + len(code.co_code)
    cand("code_object.filename", _scan(ctypes, id(code), csize, id(code.co_filename)), "id(co_filename) in the code object")
    cand("code_object.name", _scan(ctypes, id(code), csize, id(code.co_name)), "id(co_name)")
    cand("code_object.qualname", _scan(ctypes, id(code), csize, id(code.co_qualname)), "id(co_qualname)")
    cand("code_object.linetable", _scan(ctypes, id(code), csize, id(code.co_linetable)), "id(co_linetable)")
    cand("code_object.firstlineno", _scan(ctypes, id(code), csize, code.co_firstlineno, width=4), "int32 co_firstlineno")
    cand("code_object.argcount", _scan(ctypes, id(code), csize, code.co_argcount, width=4), "int32 co_argcount (7)")
    cand("code_object.co_code_adaptive", _scan_bytes(ctypes, id(code), cspan, code.co_code),
         "where co_code's bytes sit in a never-run code object")

    # Frames: sys._getframe() is a PyFrameObject {ob_base, f_back, f_frame}.
    def framefacts(marker):
        fr = sys._getframe()
        iframe = int.from_bytes(ctypes.string_at(id(fr) + 24, 8), "little")
        caller = sys._getframe(1)
        ciframe = int.from_bytes(ctypes.string_at(id(caller) + 24, 8), "little")
        c = fr.f_code
        out = {
            "executable": _scan(ctypes, iframe, 128, id(c), mask=3),
            "previous": _scan(ctypes, iframe, 128, ciframe),
            "localsplus": _scan(ctypes, iframe, 256, id(marker), mask=3),
        }
        lo = id(c) + 64
        hi = id(c) + type(c).__basicsize__ + len(c.co_code)
        raw = ctypes.string_at(iframe, 128)
        out["instr_ptr"] = [o for o in range(0, 128, 8) if lo <= int.from_bytes(raw[o:o + 8], "little") < hi]
        return out

    def framecaller():
        return framefacts(object())
    ff = framecaller()
    cand("interpreter_frame.executable", ff["executable"], "id(f_code) (tag bits masked) in the frame's _PyInterpreterFrame")
    cand("interpreter_frame.previous", ff["previous"], "the caller's _PyInterpreterFrame (PyFrameObject.f_frame @24)")
    cand("interpreter_frame.localsplus", ff["localsplus"], "id(first argument) (tag bits masked)")
    cand("interpreter_frame.instr_ptr", ff["instr_ptr"], "a word pointing into the code object's bytecode")

    s = "x" * 12345
    exact("unicode_object.asciiobject_size", sys.getsizeof("") - 1, "sys.getsizeof('') - 1")
    fresh = "".join([chr(0xe9), chr(0xe9)])  # no cached UTF-8 copy to count
    exact("unicode_object.compactunicodeobject_size", sys.getsizeof(fresh) - 3,
          "sys.getsizeof(a fresh 2-char Latin-1 str) - 3")
    cand("unicode_object.length", _scan(ctypes, id(s), 64, 12345), "len 12345 in a str")
    b = b"\x01pyobs-bytes\x02" * 3
    cand("bytes_object.ob_sval", _scan_bytes(ctypes, id(b), 128, b), "the bytes' payload")
    cand("bytes_object.ob_size", _scan(ctypes, id(b), 64, len(b)), "len(b)")
    t = (object(), 2, 3)
    cand("tuple_object.ob_item", _scan(ctypes, id(t), 64, id(t[0])), "id(t[0]) in a tuple")
    cand("tuple_object.ob_size", _scan(ctypes, id(t), 64, 3), "len 3 in a tuple")
    lst = [object()] * 7
    ranges = _readable_ranges()
    raw = ctypes.string_at(id(lst), 64)
    litems = []
    for o in range(0, 64, 8):
        p = int.from_bytes(raw[o:o + 8], "little")
        if _readable(ranges, p, 8) and int.from_bytes(ctypes.string_at(p, 8), "little") == id(lst[0]):
            litems.append(o)
    cand("list_object.ob_item", litems, "a pointer to an array starting with id(l[0])")
    cand("list_object.ob_size", _scan(ctypes, id(lst), 64, 7), "len 7 in a list")
    exact("list_object.size", list.__basicsize__, "list.__basicsize__")
    exact("dict_object.size", dict.__basicsize__, "dict.__basicsize__")
    exact("float_object.size", float.__basicsize__, "float.__basicsize__")
    cand("float_object.ob_fval", _scan_bytes(ctypes, id(1234.5), 32, struct.pack("<d", 1234.5)), "the double 1234.5")
    exact("long_object.ob_digit", int.__basicsize__, "int.__basicsize__ = offsetof(PyLongObject, long_value.ob_digit)")
    cand("type_object.tp_flags", _scan(ctypes, id(int), 512, int.__flags__), "int.__flags__ in PyLong_Type")
    cand("type_object.tp_basicsize", _scan(ctypes, id(int), 512, int.__basicsize__), "int.__basicsize__ in PyLong_Type")
    raw = ctypes.string_at(id(int), 64)
    tpn = []
    for o in range(0, 64, 8):
        p = int.from_bytes(raw[o:o + 8], "little")
        if _readable(ranges, p, 4) and ctypes.string_at(p, 4) == b"int\x00":
            tpn.append(o)
    cand("type_object.tp_name", tpn, "a char* to \"int\" in PyLong_Type")

    if minor >= 14:
        def g():
            yield 1
        gen = g()
        gf = gen.gi_frame
        giframe = int.from_bytes(ctypes.string_at(id(gf) + 24, 8), "little")
        exact("gen_object.gi_iframe", giframe - id(gen), "gi_frame.f_frame - id(generator): the embedded frame")
        cand("gen_object.gi_name", _scan(ctypes, id(gen), 128, id(gen.__name__)), "id(gen.__name__)")
        st = set(range(37))
        cand("set_object.used", _scan(ctypes, id(st), 64, 37), "len 37 in a set")

    doc = {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "label": label,
        "table_bytes": n,
        "facts": facts,
    }
    path = os.path.join(out, "debug-offsets-3.%d.facts.json" % minor)
    _write_json(path, doc)
    sys.stderr.write("%s: %d facts\n" % (path, len(facts)))


UNICODE_TEXTS = [
    "",
    "abc",
    "code.py",
    "\x00nul\x7f",
    "\xfcn\xefcode",                 # "ünïcode": Latin-1, kind 1, not ASCII
    "\xff",
    "\u8655\u7406",                   # "處理": kind 2
    "a\u0100z",
    "\U0001f40d",                     # "🐍": kind 4
    "mixed \xfc \u8655 \U0001f40d",
    "lone \udc80 surrogate",           # kind 2 with a lone surrogate
    "\U0001f40d\ud800",               # kind 4 with a lone surrogate
    "\U0010ffff",
]


def emit_unicode(out, label):
    """State byte and data of real compact str objects (PyASCIIObject.state @32)."""
    import ctypes

    items = []
    for i, lit in enumerate(UNICODE_TEXTS):
        text = "".join([lit, ""])  # a fresh object, no cached UTF-8 copy
        if len(text) > 0 and text is lit:
            text = lit[:1] + lit[1:]
        width = 1
        if text and max(map(ord, text)) > 0xFFFF:
            width = 4
        elif text and max(map(ord, text)) > 0xFF:
            width = 2
        enc = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[width]
        payload = text.encode(enc, "surrogatepass") + b"\x00" * width
        size = sys.getsizeof(text)
        raw = ctypes.string_at(id(text), size)
        # Data sits at the end of a compact str: search for it there.
        off = size - len(payload)
        if raw[off:] != payload:
            raise SystemExit("unicode %r: payload not at the end of the object" % (text,))
        items.append({
            "codepoints": [ord(c) for c in text],
            "state": raw[32],
            "kind": width,
            "data_offset": off,
            "data": raw[off:off + len(text) * width].hex(),
        })
    doc = {"python": "%d.%d.%d" % sys.version_info[:3], "label": label, "facts": items}
    path = os.path.join(out, "unicode-3.%d.json" % sys.version_info[1])
    _write_json(path, doc)
    sys.stderr.write("%s: %d strings\n" % (path, len(items)))


def emit(out, label):
    minor = sys.version_info[1]
    os.makedirs(out, exist_ok=True)
    emit_linetables(out, label)
    emit_unicode(out, label)
    if minor in DEBUG_TABLE_SIZE:
        emit_debug_offsets(out, label)


# --------------------------------------------------------------------------
# Driver mode.
# --------------------------------------------------------------------------

def default_manifest():
    if os.environ.get("PYOBS_INTERPRETERS"):
        return os.environ["PYOBS_INTERPRETERS"]
    cache = os.environ.get("PYOBS_PYTHONS_CACHE", "/var/cache/pyobs-pythons")
    return os.path.join(cache, "interpreters.tsv")


def drive(manifest, out):
    seen = set()
    rc = 0
    with open(manifest) as f:
        rows = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    for label, version, argv in rows:
        minor = version.split(".")[1]
        if minor in seen:
            sys.stderr.write("%s: 3.%s already written; skipping\n" % (label, minor))
            continue
        seen.add(minor)
        cmd = argv.split() + [os.path.abspath(__file__), "--emit", out, "--label", label]
        sys.stderr.write("== %s: %s\n" % (label, " ".join(cmd)))
        if subprocess.call(cmd) != 0:
            sys.stderr.write("%s: FAILED\n" % label)
            rc = 1
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", default=default_manifest())
    ap.add_argument("--out", default=os.path.join(REPO, "testdata", "pyframes"))
    ap.add_argument("--emit", metavar="DIR", help="emit mode: write DIR's files for this interpreter")
    ap.add_argument("--label", default="?")
    a = ap.parse_args()
    if a.emit:
        emit(a.emit, a.label)
        return 0
    return drive(a.manifest, os.path.abspath(a.out))


if __name__ == "__main__":
    sys.exit(main())
