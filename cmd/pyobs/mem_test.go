package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/mem"
	"github.com/pyobs/pyobs/internal/testutil"
)

// leakTarget leaks 4 MiB/s from leak() and allocates and frees as much in
// churn(), on a catch-up schedule (the average rate holds under load), and
// reports tracemalloc.is_tracing() every 0.1 s.
const leakTarget = `
import time, tracemalloc
RATE = 4 * 1024 * 1024
CHUNK = 64 * 1024
kept = []

def leak(n):
    for _ in range(n):
        kept.append(bytes(CHUNK))  # LEAK LINE

def churn(n):
    for _ in range(n):
        b = bytes(CHUNK)
        del b

t0 = time.monotonic()
done = 0
last = 0.0
print("READY", flush=True)
while True:
    want = int((time.monotonic() - t0) * RATE / CHUNK)
    leak(want - done)
    churn(want - done)
    done = want
    now = time.monotonic()
    if now - last >= 0.1:
        print("TRACING", tracemalloc.is_tracing(), flush=True)
        last = now
    time.sleep(0.01)
`

// leakLine is the line of "# LEAK LINE" in leakTarget.
var leakLine = func() int {
	for i, l := range strings.Split(leakTarget, "\n") {
		if strings.Contains(l, "# LEAK LINE") {
			return i + 1
		}
	}
	return 0
}()

// tracingNow drains the target's stale reports and returns the next one.
func tracingNow(t *testing.T, tg *testutil.Target) string {
	t.Helper()
	for len(tg.Lines) > 0 {
		<-tg.Lines
	}
	nextLine(t, tg, "TRACING ", 5*time.Second) // may predate the drain
	return nextLine(t, tg, "TRACING ", 5*time.Second)
}

func TestMemTracemallocLeak(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range remoteExecInterps(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := startInline(t, in, leakTarget, nil)
			if got := tracingNow(t, tg); got != "False" {
				t.Fatalf("tracemalloc on before pyobs: %s", got)
			}
			r := testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "3s", "--engine", "tracemalloc", "--format", "json")
			if r.Code != 0 {
				t.Fatalf("mem: exit %d\nstderr: %s", r.Code, r.Stderr)
			}
			var res mem.Result
			if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
				t.Fatalf("mem JSON: %v\n%s", err, r.Stdout)
			}
			if len(res.Growth) == 0 {
				t.Fatalf("no growth:\n%s", r.Stdout)
			}
			g := res.Growth[0]
			if g.Function != "leak" || g.Line != leakLine || !strings.HasSuffix(g.File, "target.py") {
				t.Fatalf("first by growth: %s (%s:%d), want leak (target.py:%d)\n%s", g.Function, g.File, g.Line, leakLine, r.Stdout)
			}
			const truth = 4 * 1024 * 1024
			if rate := g.BytesPerS; rate < 0.85*truth || rate > 1.15*truth {
				t.Errorf("leak rate %.0f B/s, the target leaks %d B/s (±15%%)", rate, truth)
			}
			if len(g.Stack) < 2 || g.Stack[1].Function != "<module>" {
				t.Errorf("leak's stack: %+v", g.Stack)
			}
			for _, s := range res.Growth {
				for _, f := range s.Stack {
					if f.Function == "churn" {
						t.Errorf("the churner is in growth: %+v", s)
					}
				}
			}
			if res.TracemallocWasOn || res.TracemallocOnNow {
				t.Errorf("tracemalloc was on %v / is on %v", res.TracemallocWasOn, res.TracemallocOnNow)
			}
			var traced, rss int
			var first, last *int64
			for _, c := range res.Curve {
				if c.TracedBytes != nil {
					traced++
					if first == nil {
						first = c.TracedBytes
					}
					last = c.TracedBytes
				}
				if c.RSSBytes != nil {
					rss++
				}
			}
			if traced < 3 || rss < 3 || *last <= *first {
				t.Errorf("growth curve: %d traced points (%v .. %v), %d RSS points", traced, first, last, rss)
			}
			if res.Memory.Error != "" || res.Memory.RSSEnd == 0 {
				t.Errorf("memory: %+v", res.Memory)
			}
			// The target says tracemalloc is off again.
			if got := tracingNow(t, tg); got != "False" {
				t.Fatalf("tracemalloc after pyobs mem: %s", got)
			}
			if in.Label != "sid-3.14" {
				return
			}
			// Bytes as the flame formats' weights.
			r = testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "1s", "--engine", "tracemalloc", "--format", "folded")
			if r.Code != 0 || !strings.Contains(r.Stdout, "leak (") {
				t.Fatalf("mem --format folded: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
			}
			for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if strings.Contains(l, "leak (") {
					w, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
					if w < truth/2 {
						t.Errorf("folded weight of the leak over 1 s: %d bytes", w)
					}
				}
			}
		})
	}
}

// SIGKILL of pyobs mid-window: the target keeps running and the watchdog
// pyobs started in it turns tracemalloc off.
func TestMemSIGKILL(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	tg := startInline(t, in, leakTarget, nil)
	cmd := exec.Command(testutil.Binary(t), "mem", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--engine", "tracemalloc")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for tracingNow(t, tg) != "True" {
		if time.Now().After(deadline) {
			t.Fatal("pyobs mem never turned tracemalloc on")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	killed := time.Now()
	for tracingNow(t, tg) != "False" {
		if time.Since(killed) > 5*time.Second {
			t.Fatal("tracemalloc still on 5 s after pyobs was killed")
		}
	}
	t.Logf("tracemalloc off %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	if !testutilAlive(tg.Pid) {
		t.Fatal("the target died")
	}
}

func TestMemRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "pyenv-3.13"), leakTarget, nil)
	r := testutil.Run(t, 30*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "1s", "--engine", "tracemalloc")
	if r.Code != 5 || !strings.Contains(r.Stderr, "needs 3.14+") { // README: 5, a version the command does not support
		t.Fatalf("mem --engine tracemalloc on 3.13: exit %d, want 5\nstderr: %s", r.Code, r.Stderr)
	}
	r = testutil.Run(t, 30*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "--engine", "nope")
	if r.Code != 2 {
		t.Fatalf("mem --engine nope: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	r = testutil.Run(t, 30*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "--engine", "tracemalloc", "--native")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--native needs the probe engine") {
		t.Fatalf("mem --engine tracemalloc --native: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	for _, bad := range []string{"0", "2000000000", "-1"} {
		r = testutil.Run(t, 30*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "--sample-bytes", bad)
		if r.Code != 2 || strings.Contains(r.Stderr, "panic") {
			t.Errorf("mem --sample-bytes %s: exit %d\nstderr: %s", bad, r.Code, r.Stderr)
		}
	}
}

// The probe engine on every interpreter it supports (auto's before 3.14): the
// leaking line first by growth at its rate, the churner absent.
func TestMemProbeLeak(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "debian-3.11", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			tg := startInline(t, testutil.Find(t, label), leakTarget, nil)
			nextLine(t, tg, "TRACING ", 5*time.Second)
			r := testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "2s", "--engine", "probe", "--format", "json")
			if r.Code != 0 {
				t.Fatalf("mem: exit %d\nstderr: %s", r.Code, r.Stderr)
			}
			var res mem.Result
			if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
				t.Fatalf("mem JSON: %v\n%s", err, r.Stdout)
			}
			if res.Engine != mem.EngineProbe || res.Probe == nil {
				t.Fatalf("engine %q (%q), probe account %v", res.Engine, res.EngineReason, res.Probe)
			}
			if len(res.Growth) == 0 {
				t.Fatalf("no growth:\n%s", r.Stdout)
			}
			g := res.Growth[0]
			if g.Function != "leak" || g.Line != leakLine || !strings.HasSuffix(g.File, "target.py") {
				t.Fatalf("first by growth: %s (%s:%d), want leak (target.py:%d)\n%s", g.Function, g.File, g.Line, leakLine, r.Stdout)
			}
			const truth = 4 * 1024 * 1024
			if rate := g.BytesPerS; rate < 0.85*truth || rate > 1.15*truth {
				t.Errorf("leak rate %.0f B/s, the target leaks %d B/s (±15%%)", rate, truth)
			}
			if len(g.Stack) < 2 || g.Stack[1].Function != "<module>" {
				t.Errorf("leak's stack: %+v", g.Stack)
			}
			for _, s := range res.Growth {
				for _, f := range s.Stack {
					if f.Function == "churn" {
						t.Errorf("the churner is in growth: %+v", s)
					}
				}
			}
			var curve int
			for _, c := range res.Curve {
				if c.TracedBytes != nil {
					curve++
				}
			}
			if curve < 3 || res.TracedPeakBytes < truth {
				t.Errorf("growth curve: %d points, peak %d bytes", curve, res.TracedPeakBytes)
			}
			if p := res.Probe; p.Calls == 0 || p.Tracked == 0 || p.Stacks.Walked == 0 {
				t.Errorf("probe account: %+v", p)
			}
			if label == "pyenv-3.12" {
				// Sampled: blocks of 64 KiB kept with probability 1/4, scaled back.
				r := testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "2s", "--engine", "probe", "--sample-bytes", "262144", "--format", "folded")
				if r.Code != 0 || !strings.Contains(r.Stdout, "leak (") {
					t.Fatalf("mem --sample-bytes 262144 --format folded: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
				}
				for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
					if strings.Contains(l, "leak (") {
						w, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
						if w < truth || w > 3*truth {
							t.Errorf("folded weight of the leak over 2 s, sampled: %d bytes", w)
						}
					}
				}
			}
		})
	}
}

// allocTarget allocates and frees small blocks as fast as it can and
// reports its loop count every 0.2 s.
const allocTarget = `
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
        print("RATE", int(n / (now - t)), flush=True)
        n, t = 0, now
`

// rateNow is the median of the target's next k rate reports.
func rateNow(t *testing.T, tg *testutil.Target, k int) float64 {
	t.Helper()
	for len(tg.Lines) > 0 {
		<-tg.Lines
	}
	nextLine(t, tg, "RATE ", 5*time.Second)
	var rs []float64
	for i := 0; i < k; i++ {
		v, _ := strconv.ParseFloat(nextLine(t, tg, "RATE ", 5*time.Second), 64)
		rs = append(rs, v)
	}
	sort.Float64s(rs)
	return rs[len(rs)/2]
}

// SIGKILL of pyobs mid-window with the probes attached: the kernel removes
// them with pyobs's perf events, and the target's allocation rate comes
// back (the probes are traps on every call: it drops while they are on).
func TestMemProbeSIGKILL(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), allocTarget, nil)
	base := rateNow(t, tg, 5)
	cmd := exec.Command(testutil.Binary(t), "mem", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--engine", "probe")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(15 * time.Second)
	var on float64
	for {
		on = rateNow(t, tg, 1)
		if on < 0.3*base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probes never slowed the target: %.0f/s, %.0f/s before", on, base)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// The best of the next 2 s (the machine may be loaded: a uprobe left
	// would keep every report tens of times slower).
	var after float64
	for i := 0; i < 10; i++ {
		after = max(after, rateNow(t, tg, 1))
	}
	t.Logf("allocation loop: %.0f/s before, %.0f/s with the probes, best %.0f/s after the SIGKILL", base, on, after)
	if after < 0.5*base {
		t.Errorf("the target is still slow after pyobs was killed: %.0f/s, %.0f/s before (a uprobe left?)", after, base)
	}
	if b, err := os.ReadFile("/sys/kernel/tracing/uprobe_events"); err == nil && strings.Contains(string(b), "python") {
		t.Errorf("uprobe events left in tracefs:\n%s", b)
	}
	if !testutilAlive(tg.Pid) {
		t.Fatal("the target died")
	}
}

// TestMemAutoEngine: auto takes tracemalloc on 3.14+ (far cheaper than the
// probes) and the probes before, saying why.
func TestMemAutoEngine(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct{ label, want string }{{"pyenv-3.12", mem.EngineProbe}, {"sid-3.14", mem.EngineTracemalloc}} {
		t.Run(c.label, func(t *testing.T) {
			tg := startInline(t, testutil.Find(t, c.label), leakTarget, nil)
			nextLine(t, tg, "TRACING ", 5*time.Second)
			r := testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "1s", "--format", "json")
			if r.Code != 0 {
				t.Fatalf("mem: exit %d\nstderr: %s", r.Code, r.Stderr)
			}
			var res mem.Result
			if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
				t.Fatalf("mem JSON: %v\n%s", err, r.Stdout)
			}
			if res.Engine != c.want || !strings.HasPrefix(res.EngineReason, "auto: ") {
				t.Errorf("auto on %s: engine %q (%q), want %s with its reason", c.label, res.Engine, res.EngineReason, c.want)
			}
		})
	}
}

// RSS (and PSS) bound the window the probes counted: on a target that grows
// only by what it leaks, RSS grows by the tracked growth and by the target's
// own rate over the window, not also by what it grew while the probes were
// loaded (a second or more beside a hog) or drained.
func TestMemProbeRSSWindow(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 2)
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), leakTarget, nil)
	nextLine(t, tg, "TRACING ", 5*time.Second)
	r := testutil.Run(t, 60*time.Second, "mem", "-p", strconv.Itoa(tg.Pid), "-d", "3s", "--engine", "probe", "--format", "json")
	if r.Code != 0 {
		t.Fatalf("mem: exit %d\nstderr: %s", r.Code, r.Stderr)
	}
	var res mem.Result
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("mem JSON: %v\n%s", err, r.Stdout)
	}
	m := res.Memory
	if m.Error != "" {
		t.Fatalf("memory: %s", m.Error)
	}
	const rate = 4 * 1024 * 1024 // the target's leak, bytes/s
	truth := rate * res.WindowS
	tracked := float64(res.GrowthTotalBytes)
	// The target paces its leak by the clock: beside two hogs it can fall
	// behind its rate (never ahead), so the rate bounds from above, and
	// from below only loosely.
	if v := float64(m.RSSDeltaS); v < 0.85*tracked || v > 1.15*tracked || v < 0.5*truth || v > 1.15*truth {
		t.Errorf("RSS delta %d bytes over %.2f s; tracked growth %d (want within 15 %%), the target leaks at most %.0f", m.RSSDeltaS, res.WindowS, res.GrowthTotalBytes, truth)
	}
}
