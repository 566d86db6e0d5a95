#!/usr/bin/env bash
# Target slowdown under `pyobs mem`, each engine and sampling rate, beside
# memray (PyPI, scripts/pypkgs.sh --memray) on the same target in the same
# run. The target only allocates (`b = bytearray(64); del b`) and reports
# its loop rate every 0.2 s; each observer is attached to a running target
# and the rate while it is attached is compared with the rate before it
# came and after it left (the same process: no start-up noise). memray is
# attached the same way (`memray attach`, which injects itself with gdb);
# a row says "n/a" with the reason where an observer cannot run.
#
# Environment: LABELS (interpreters of the manifest, default
# "pyenv-3.12 sid-3.14"), REPS (default 3; medians), SETTLE (s to wait for
# an observer to attach before measuring, default 3), MEASURE (s, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
LABELS=${LABELS:-pyenv-3.12 sid-3.14}
REPS=${REPS:-3}
SETTLE=${SETTLE:-3}
MEASURE=${MEASURE:-2}
MANIFEST=$(scripts/pythons.sh | tail -n 1)
PYPKGS=$(scripts/pypkgs.sh --memray | tail -n 1)
make -s build
command -v gdb >/dev/null || echo "bench_mem: gdb is not installed: memray attach cannot run (apt-get install gdb)" >&2
exec python3 - "$MANIFEST" "$PYPKGS" "$LABELS" "$REPS" "$SETTLE" "$MEASURE" <<'PY'
import os, shlex, statistics, subprocess, sys, tempfile, threading, time

manifest, pypkgs, labels, reps, settle, measure = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
interps = {}
for line in open(manifest):
    f = line.rstrip("\n").split("\t")
    if len(f) == 3:
        interps[f[0]] = (f[1], shlex.split(f[2]))

TARGET = """
import time
print("READY", flush=True)
n = 0
t = time.monotonic()
while True:
    for _ in range(2000):
        b = bytearray(64)
        del b
    n += 2000
    now = time.monotonic()
    if now - t >= 0.2:
        print("RATE", now, n / (now - t), flush=True)
        n, t = 0, now
"""

class Target:
    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.rates = []  # (monotonic, rate)
        self.ready = threading.Event()
        threading.Thread(target=self.read, daemon=True).start()
        if not self.ready.wait(30):
            raise RuntimeError("the target printed no READY")

    def read(self):
        for l in self.p.stdout:
            if l.startswith("READY"):
                self.ready.set()
            elif l.startswith("RATE"):
                _, at, r = l.split()
                self.rates.append((float(at), float(r)))

    def rate(self, t0, t1):
        rs = [r for at, r in self.rates if t0 <= at <= t1]
        return statistics.median(rs) if rs else None

    def stop(self):
        self.p.kill()
        self.p.wait()

def window(tg):
    t0 = time.monotonic()
    time.sleep(measure)
    return tg.rate(t0, time.monotonic())

def observe(tg, argv, env, attached_on_exit):
    """The target's rate before, with argv attached, and after. pyobs
    observes while it runs (measured SETTLE s after its start); memray
    attach returns once it tracks in the background (measured then)."""
    before = window(tg)
    out = tempfile.TemporaryFile()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, env=env)
    if attached_on_exit:
        p.wait(timeout=300)
        during = window(tg) if p.returncode == 0 else None
        time.sleep(settle + 1)  # its --duration runs out
    else:
        time.sleep(settle)
        during = window(tg) if p.poll() is None else None
        p.wait(timeout=300)
    time.sleep(0.5)
    after = window(tg)
    out.seek(0)
    err = out.read().decode(errors="replace").strip().splitlines()
    if p.returncode != 0 or during is None:
        return None, "exit %s: %s" % (p.returncode, err[-1] if err else "?")
    base = statistics.mean([x for x in (before, after) if x])
    return base / during if during else None, ""

pyobs = os.path.abspath("bin/pyobs")
tmp = tempfile.mkdtemp()
script = os.path.join(tmp, "alloc.py")
open(script, "w").write(TARGET)
dur = str(int(settle + measure + 2)) + "s"
print("%-12s %-44s %12s   %s" % ("python", "observer", "slowdown", "runs"))
for label in labels:
    if label not in interps:
        print("%-12s not in %s" % (label, manifest))
        continue
    ver, argv = interps[label]
    minor = ver.rsplit(".", 1)[0]
    mdir = os.path.join(pypkgs, "memray-cp" + minor.replace(".", ""))
    env = dict(os.environ)
    have_memray = os.path.exists(os.path.join(mdir, ".ok"))
    if have_memray:
        env["PYTHONPATH"] = mdir  # memray attach imports memray inside the target
    configs = [
        ("pyobs mem probe (--sample-bytes 64 KiB)", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "probe"]),
        ("pyobs mem probe --sample-bytes 1 MiB", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "probe", "--sample-bytes", "1048576"]),
        ("pyobs mem probe --sample-bytes 1 (all)", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "probe", "--sample-bytes", "1"]),
        ("pyobs mem probe --native (64 KiB)", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "probe", "--native"]),
    ]
    if int(minor.split(".")[1]) >= 14:
        configs += [
            ("pyobs mem tracemalloc --frames 16", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "tracemalloc"]),
            ("pyobs mem tracemalloc --frames 1", [pyobs, "mem", "-p", "PID", "-d", dur, "--engine", "tracemalloc", "--frames", "1"]),
        ]
    mray = [argv[0]] + argv[1:] + ["-m", "memray", "attach", "-f", "--duration", str(int(measure + settle))]
    configs += [
        ("memray attach (gdb)", mray + ["-o", os.path.join(tmp, "m.bin"), "PID"]),
        ("memray attach --trace-python-allocators", mray + ["--trace-python-allocators", "-o", os.path.join(tmp, "m.bin"), "PID"]),
    ]
    tg = Target(argv + [script], env)
    try:
        time.sleep(1)
        res = {name: [] for name, _ in configs}
        why = {}
        for _ in range(reps):
            for name, cmd in configs:
                if name.startswith("memray") and not have_memray:
                    why[name] = "memray did not install for %s (scripts/pypkgs.sh --memray)" % minor
                    continue
                s, w = observe(tg, [str(tg.p.pid) if a == "PID" else a for a in cmd], env, name.startswith("memray"))
                if s is None:
                    why[name] = w
                else:
                    res[name].append(s)
        for name, _ in configs:
            r = res[name]
            if r:
                print("%-12s %-44s %11.1fx   %s" % (label, name, statistics.median(r), " ".join("%.1f" % x for x in r)))
            else:
                print("%-12s %-44s %12s   %s" % (label, name, "n/a", why.get(name, "")))
    finally:
        tg.stop()
PY
