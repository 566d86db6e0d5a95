package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/testutil"
)

type offcpuJSON struct {
	Engine string     `json:"engine"`
	Meta   flame.Meta `json:"meta"`
	Result struct {
		WindowS  float64          `json:"window_s"`
		BPF      *offcpu.BPFStats `json:"bpf"`
		Excluded *offcpu.Excluded `json:"excluded"`
		Threads  []struct {
			Tid     int                `json:"tid"`
			Name    string             `json:"name"`
			WindowS float64            `json:"window_s"`
			OnCPUS  float64            `json:"on_cpu_s"`
			OffCPUS float64            `json:"off_cpu_s"`
			RunQS   float64            `json:"runqueue_s"`
			ShortS  float64            `json:"short_waits_s"`
			ClassS  map[string]float64 `json:"classes_s"`
		} `json:"threads"`
	} `json:"result"`
	Top []offcpu.TopStack `json:"top"`
}

// runOffcpuJSON watches offcpu_waits.py MODE for window with --wall
// --threads (and extra flags, e.g. --engine) and returns the JSON account.
func runOffcpuJSON(t *testing.T, label, mode string, window time.Duration, extra ...string) offcpuJSON {
	t.Helper()
	in := testutil.Find(t, label)
	tg := testutil.Start(t, in, "offcpu_waits.py", mode)
	time.Sleep(200 * time.Millisecond) // let the threads settle into their loops
	return offcpuOn(t, tg.Pid, label, mode, window, extra...)
}

// offcpuOn runs offcpu on pid; see runOffcpuJSON.
func offcpuOn(t *testing.T, pid int, label, mode string, window time.Duration, extra ...string) offcpuJSON {
	t.Helper()
	args := append([]string{"offcpu", "-p", fmt.Sprint(pid), "-d", window.String(), "--wall", "--threads", "--format", "json"}, extra...)
	r := testutil.Run(t, 60*time.Second, args...)
	if r.Code != 0 {
		t.Fatalf("offcpu exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "switches") || !strings.Contains(r.Stderr, "observer CPU") || !strings.Contains(r.Stderr, "short waits not read") {
		t.Errorf("footer lacks the run's account: %q", r.Stderr)
	}
	var out offcpuJSON
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("json: %v\n%.800s", err, r.Stdout)
	}
	for i, a := range extra {
		want := map[string]string{offcpu.EngineBPF: "bpf-sched-switch", offcpu.EnginePerf: "perf-switch"}
		if a == "--engine" && i+1 < len(extra) && want[extra[i+1]] != out.Engine {
			t.Errorf("--engine %s ran engine %q", extra[i+1], out.Engine)
		}
	}
	if out.Meta.Unit != "microseconds" || out.Meta.Command != "offcpu" {
		t.Errorf("meta: %+v", out.Meta)
	}
	// --wall: per thread, on-CPU + off-CPU + run-queue = window (5 %).
	for _, th := range out.Result.Threads {
		sum := th.OnCPUS + th.OffCPUS + th.RunQS
		if math.Abs(sum-out.Result.WindowS) > 0.05*out.Result.WindowS {
			t.Errorf("%s: on %.3f + off %.3f + run-queue %.3f = %.3f s, window %.3f s (thread window %.3f s; bpf account %+v)", th.Name, th.OnCPUS, th.OffCPUS, th.RunQS, sum, out.Result.WindowS, th.WindowS, out.Result.BPF)
		}
	}
	t.Logf("%s %s (%s): window %.3fs", label, mode, out.Engine, out.Result.WindowS)
	for _, th := range out.Result.Threads {
		t.Logf("  %-10s on %.3f off %.3f rq %.3f short %.3f classes %v", th.Name, th.OnCPUS, th.OffCPUS, th.RunQS, th.ShortS, th.ClassS)
	}
	return out
}

func (o offcpuJSON) thread(t *testing.T, name string) (on, off, rq float64, classes map[string]float64) {
	t.Helper()
	for _, th := range o.Result.Threads {
		if th.Name == name {
			return th.OnCPUS, th.OffCPUS, th.RunQS, th.ClassS
		}
	}
	t.Fatalf("no thread %q in %+v", name, o.Result.Threads)
	return
}

// short is the time of thread name's waits that nobody read.
func (o offcpuJSON) short(name string) float64 {
	for _, th := range o.Result.Threads {
		if th.Name == name {
			return th.ShortS
		}
	}
	return 0
}

// attributed is the µs the profile folds under stacks containing frame
// (a function label prefix) with this class.
func (o offcpuJSON) attributed(thread, frame, class string) float64 {
	var us int64
	for _, s := range o.Top {
		if s.Class == class && strings.Contains(s.Stack, thread+" (") && strings.Contains(s.Stack, ";"+frame+" (") {
			us += s.US
		}
	}
	return float64(us) / 1e6
}

// classesUnder is, per class, the seconds the profile folds under
// stacks of thread containing frame.
func (o offcpuJSON) classesUnder(thread, frame string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range o.Top {
		if strings.Contains(s.Stack, thread+" (") && strings.Contains(s.Stack, ";"+frame+" (") {
			out[s.Class] += float64(s.US) / 1e6
		}
	}
	return out
}

var offcpuInterps = []string{"pyenv-3.11", "pyenv-3.13", "sid-3.14"}

// TestOffcpuWaits: ground truth from offcpu_waits.py — a lock waiter,
// a pipe reader, a sleeper, a CPU burner, two GIL-contending spinners —
// on the perf engine (the eBPF engine: TestOffcpuBPFWaits).
func TestOffcpuWaits(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range offcpuInterps {
		t.Run(label, func(t *testing.T) { offcpuWaitChecks(t, label, offcpu.EnginePerf) })
	}
}

// offcpuWaitChecks runs the done-means checks of offcpu on one engine.
func offcpuWaitChecks(t *testing.T, label, engine string) {
	const window = 1500 * time.Millisecond
	t.Run("lock", func(t *testing.T) {
		o := runOffcpuJSON(t, label, "lock", window, "--engine", engine)
		w := o.Result.WindowS
		_, _, _, cl := o.thread(t, "waiter")
		// Waits nobody read (the observer was not scheduled in time on a
		// loaded machine) have no Python stack, and with the perf engine
		// no class: they are the slack, but most waits must be read.
		short := o.short("waiter")
		if engine == offcpu.EngineBPF {
			short = 0 // the kernel classes every wait
		}
		// eBPF: after each waking the waiter may wait for a CPU (a busy
		// machine): run-queue under wait_for_lock, not lock time.
		woken := 0.0
		if engine == offcpu.EngineBPF {
			woken = o.attributed("waiter", "wait_for_lock", offcpu.ClassRunQueue)
		}
		if cl["lock"]+woken+short < 0.7*w {
			t.Errorf("waiter blocked in class lock %.3fs (+%.3fs woken, waiting for a CPU, +%.3fs unclassed), want ≥ 70 %% of %.3fs", cl["lock"], woken, short, w)
		}
		if a := o.attributed("waiter", "wait_for_lock", "lock"); a+woken+o.short("waiter") < 0.7*w || a < 0.5*w {
			t.Errorf("profile attributes %.3fs of lock waits to wait_for_lock (+%.3fs woken, +%.3fs not read), want ≥ 70 %% of %.3fs", a, woken, o.short("waiter"), w)
		}
		_, _, _, hc := o.thread(t, "holder")
		if hc["sleep"] < 0.7*w {
			t.Errorf("holder sleeps %.3fs, want ≥ 70 %% of %.3fs", hc["sleep"], w)
		}
	})
	t.Run("io", func(t *testing.T) {
		o := runOffcpuJSON(t, label, "io", window, "--engine", engine)
		w := o.Result.WindowS
		if _, _, _, c := o.thread(t, "reader"); c["pipe/read"] < 0.95*w {
			t.Errorf("reader in pipe/read %.3fs, want ≈ window %.3fs (classes %v)", c["pipe/read"], w, c)
		}
		if a := o.attributed("reader", "read_pipe", "pipe/read"); a < 0.95*w {
			t.Errorf("profile attributes %.3fs of pipe/read to read_pipe, want ≈ %.3fs", a, w)
		}
		if _, _, _, c := o.thread(t, "sleeper"); c["sleep"] < 0.95*w {
			t.Errorf("sleeper in sleep %.3fs, want ≈ window %.3fs (classes %v)", c["sleep"], w, c)
		}
		if a := o.attributed("sleeper", "nap", "sleep"); a < 0.95*w {
			t.Errorf("profile attributes %.3fs of sleep to nap, want ≈ %.3fs", a, w)
		}
		// Blocked (not run-queue: the machine may be busy) ≈ 0.
		if _, off, _, c := o.thread(t, "burner"); off > 0.05*w {
			t.Errorf("CPU-bound burner blocked %.3fs of %.3fs (classes %v)", off, w, c)
		}
	})
	t.Run("cpu2", func(t *testing.T) {
		o := runOffcpuJSON(t, label, "cpu2", window, "--engine", engine)
		w := o.Result.WindowS
		onA, _, rqA, ca := o.thread(t, "spin-a")
		onB, _, rqB, cb := o.thread(t, "spin-b")
		// A waits for the GIL while B holds it: B on CPU, or B
		// preempted while holding it. Waits nobody read are the
		// slack (short GIL hand-offs).
		check := func(me string, gil, otherOn, otherRQ, myShort float64) {
			if gil < 0.1*w {
				t.Errorf("%s: GIL wait %.3fs of %.3fs: no contention seen", me, gil, w)
			}
			if gil+myShort < 0.5*otherOn || gil > otherOn+otherRQ+0.15*w {
				t.Errorf("%s: GIL wait %.3fs (+%.3fs not read), the other thread ran %.3fs (+%.3fs preempted)", me, gil, myShort, otherOn, otherRQ)
			}
		}
		shortOf := func(name string) float64 {
			for _, th := range o.Result.Threads {
				if th.Name == name {
					return th.ShortS
				}
			}
			return 0
		}
		check("spin-a", ca["GIL"], onB, rqB, shortOf("spin-a"))
		check("spin-b", cb["GIL"], onA, rqA, shortOf("spin-b"))
	})
}

// TestOffcpuFolded: -o FILE.folded writes a folded profile in µs that reads
// back, with class frames; the default text summary names the classes.
func TestOffcpuFolded(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.13")
	tg := testutil.Start(t, in, "offcpu_waits.py", "io")
	out := filepath.Join(t.TempDir(), "w.folded")
	r := testutil.Run(t, 60*time.Second, "offcpu", "-p", fmt.Sprint(tg.Pid), "-d", "500ms", "--min-block", "1ms", "-o", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := flame.ReadFolded(bytes.NewReader(b))
	if err != nil || p.Total() < 400_000 {
		t.Fatalf("folded: %v, total %d µs\n%s", err, p.Total(), b)
	}
	if !strings.Contains(string(b), "read_pipe (") || !strings.Contains(string(b), ";[pipe/read] ") || !strings.Contains(string(b), ";[sleep] ") {
		t.Errorf("folded output lacks the reader's and sleeper's waits:\n%s", b)
	}
	r = testutil.Run(t, 60*time.Second, "offcpu", "-p", fmt.Sprint(tg.Pid), "-d", "300ms")
	if r.Code != 0 || !strings.Contains(r.Stdout, "Wait classes") || !strings.Contains(r.Stdout, "pipe/read") || !strings.Contains(r.Stdout, "reader (") {
		t.Errorf("text summary (exit %d):\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestOffcpuExclude: the sleeper of offcpu_waits.py io sleeps through the
// whole window in nap() (its own design: one sleep of an hour); excluding
// nap takes exactly that wait out of the profile and says how much, while
// the pipe reader's wait stays.
func TestOffcpuExclude(t *testing.T) {
	testutil.RequireRoot(t)
	const window = time.Second
	out := runOffcpuJSON(t, "pyenv-3.12", "io", window, "--exclude", `^nap \(`)
	x := out.Result.Excluded
	if x == nil || len(x.Patterns) != 1 || x.Stacks == 0 {
		t.Fatalf("excluded: %+v", x)
	}
	if got, w := float64(x.US)/1e6, out.Result.WindowS; got < 0.9*w || got > 1.02*w {
		t.Errorf("excluded %.3fs, want the sleeper's whole window %.3fs", got, w)
	}
	for _, s := range out.Top {
		if strings.Contains(s.Stack, ";nap (") {
			t.Errorf("excluded stack still in the profile: %s", s.Stack)
		}
	}
	if got := out.attributed("reader", "read_pipe", offcpu.ClassPipe); got < 0.7*out.Result.WindowS {
		t.Errorf("reader's read_pipe wait %.3fs of %.3fs: the filter took more than nap", got, out.Result.WindowS)
	}
	r := testutil.Run(t, 10*time.Second, "offcpu", "-p", "1", "--exclude", "(")
	if r.Code != 2 || !strings.Contains(r.Stderr, `--exclude "(" is not a regular expression: missing closing )`) || strings.Contains(r.Stderr, "error parsing") {
		t.Errorf("bad regexp: exit %d %q", r.Code, r.Stderr)
	}
}
