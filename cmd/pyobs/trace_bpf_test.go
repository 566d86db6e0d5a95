package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
	"github.com/pyobs/pyobs/internal/trace"
)

// neverStopped polls the target's threads every few ms while pyobs runs and
// records any ptrace attachment (TracerPid) or stopped state (t, T).
type neverStopped struct {
	pid   int
	stop  chan struct{}
	done  sync.WaitGroup
	polls int
	bad   string
}

func watchNeverStopped(pid int) *neverStopped {
	w := &neverStopped{pid: pid, stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				return // exited
			}
			w.polls++
			for _, e := range tasks {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
				if err != nil {
					continue
				}
				s := string(b)
				if w.bad == "" && (!strings.Contains(s, "\nTracerPid:\t0\n") || strings.Contains(s, "\nState:\tt") || strings.Contains(s, "\nState:\tT")) {
					w.bad = fmt.Sprintf("tid %s: %s", e.Name(), s)
				}
			}
		}
	}()
	return w
}

func (w *neverStopped) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	if w.bad != "" {
		t.Errorf("the target was traced or stopped during the tracepoint run:\n%s", w.bad)
	}
	if w.polls < 10 {
		t.Errorf("only %d polls of the target's state", w.polls)
	}
}

var doneRe = regexp.MustCompile(`DONE (.*)`)

// targetDone returns the target's own counts from its DONE line.
func targetDone(t *testing.T, tg *testutil.Target) map[string]uint64 {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-tg.Lines:
			if m := doneRe.FindStringSubmatch(l); m != nil {
				out := map[string]uint64{}
				for _, kv := range strings.Fields(m[1]) {
					k, v, _ := strings.Cut(kv, "=")
					n, _ := strconv.ParseUint(v, 10, 64)
					out[k] = n
				}
				return out
			}
		case <-deadline:
			t.Fatal("no DONE line from the target")
		}
	}
}

// traceGated runs pyobs trace (argv[0] is the program: pyobs or a wrapper)
// against a trace_mix.py target started with --wait-usr1, and releases the
// target once the engine is in place: the BPF links are open in pyobs
// (tracepoint) or the target is seized (ptrace). With watch, the target's
// threads are polled all along for a tracer or a stop.
func traceGated(t *testing.T, tg *testutil.Target, engine string, watch bool, argv ...string) testutil.Result {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	var w *neverStopped
	if watch {
		w = watchNeverStopped(tg.Pid)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ready := func() bool {
		if engine == "ptrace" {
			st := testutil.ProcStatus(tg.Pid)
			return st != nil && st["TracerPid"] != "0"
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		links := 0
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); l == "anon_inode:bpf_link" {
				links++
			}
		}
		return links >= 2
	}
	deadline := time.Now().Add(20 * time.Second)
	released := false
	for !released {
		select {
		case <-done:
			t.Fatalf("pyobs ended before the target was released: exit %d\nstderr: %s", cmd.ProcessState.ExitCode(), se.String())
		case <-time.After(2 * time.Millisecond):
		}
		if ready() {
			_ = syscall.Kill(tg.Pid, syscall.SIGUSR1)
			released = true
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("%s engine not in place after 20s: %s", engine, se.String())
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("pyobs did not end with its target: %s", se.String())
	}
	if w != nil {
		w.check(t)
	}
	return testutil.Result{Stdout: so.String(), Stderr: se.String(), Code: cmd.ProcessState.ExitCode()}
}

func row(out traceOut, name string) (r struct {
	Calls, Errors, Unattributed, LateReads uint64
	P50US                                  float64
	Errnos                                 map[string]uint64
	Sites                                  map[string]uint64 // "function:line" → calls
}, ok bool) {
	r.Sites = map[string]uint64{}
	for _, s := range out.Syscalls {
		if s.Name != name {
			continue
		}
		ok = true
		r.Calls, r.Errors, r.Unattributed, r.LateReads, r.P50US, r.Errnos = s.Calls, s.Errors, s.Unattributed, s.LateReads, s.P50US, s.Errnos
		for _, site := range s.TopSites {
			k := fmt.Sprintf("%s:%d", site.Function, site.Line)
			if !strings.HasSuffix(site.File, "trace_mix.py") {
				k = site.File + ":" + k
			}
			r.Sites[k] += site.Calls
		}
	}
	return
}

// TestTraceBPFStatSleep: the tracepoint engine (picked by --engine auto) on
// 300 failing os.stat and 10 sleeps of 50 ms: exact counts, the right lines
// read in the kernel at the call, and the target never stopped or
// ptrace-attached.
func TestTraceBPFStatSleep(t *testing.T) {
	testutil.RequireRoot(t)
	statLine, sleepLine := markerLine(t, "trace_mix.py", "MIX_STAT_LINE"), markerLine(t, "trace_mix.py", "MIX_SLEEP_LINE")
	for _, label := range []string{"pyenv-3.11", "sid-3.14", "pyenv-3.12", "pyenv-3.13", "debian-3.11", "sid-3.15"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			tg := testutil.Start(t, py, "trace_mix.py", "--stats", "300", "--sleeps", "10", "--wait-usr1")
			o := filepath.Join(t.TempDir(), "t.json")
			r := traceGated(t, tg, "tracepoint", true, testutil.Binary(t), "trace", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--format", "json", "-o", o)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, "engine tracepoint (auto: BPF programs loaded)") || !strings.Contains(r.Stderr, "target exited") ||
				!strings.Contains(r.Stderr, "pyobs stopped the target 0s") {
				t.Errorf("footer: %s", r.Stderr)
			}
			truth := targetDone(t, tg)
			if truth["stats"] != 300 || truth["sleeps"] != 10 {
				t.Fatalf("target reports %v", truth)
			}
			out := readTraceJSON(t, o)
			if out.Engine != "tracepoint" || out.Slowdown != trace.TracepointSlowdown || out.TargetStoppedS != 0 || out.Lost != 0 {
				t.Errorf("summary: %+v", out)
			}
			st, ok := row(out, "newfstatat")
			if !ok {
				st, ok = row(out, "statx")
			}
			want := fmt.Sprintf("stats:%d", statLine)
			if !ok || st.Calls != 300 || st.Errnos["ENOENT"] != 300 || st.Sites[want] != 300 || len(st.Sites) != 1 || st.LateReads != 0 {
				t.Errorf("stat: %+v; want exactly 300 calls, 300 ENOENT, all at %s (site read error %q)", st, want, out.SiteError)
			}
			sl, _ := row(out, "clock_nanosleep")
			want = fmt.Sprintf("nap:%d", sleepLine)
			if sl.Calls != 10 || sl.Sites[want] != 10 || sl.P50US < 45_000 || sl.P50US > 80_000 {
				t.Errorf("clock_nanosleep: %+v; want 10 calls at %s, p50 ≈ 50 ms", sl, want)
			}
			if out.SiteKernel != 310 || out.SiteLate != 0 || out.KernelDrops == nil || out.KernelDrops.Events != 0 {
				t.Errorf("sites in the kernel %d (want 310), late %d, drops %+v (site read error %q)", out.SiteKernel, out.SiteLate, out.KernelDrops, out.SiteError)
			}
		})
	}
}

// TestTraceBPFLateReadsLabelled: on 3.10 the one-frame capture (the
// fallback without the stack walk, --kernel-walk=false) cannot read the
// frame (frame objects): sites are read after the call returned and must
// be counted as late reads, never attributed.
func TestTraceBPFLateReadsLabelled(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.10")
	tg := testutil.Start(t, py, "trace_mix.py", "--stats", "300", "--sleeps", "3", "--wait-usr1") // alive a while after the stats
	o := filepath.Join(t.TempDir(), "t.json")
	r := traceGated(t, tg, "tracepoint", false, testutil.Binary(t), "trace", "--engine", "tracepoint", "--kernel-walk=false", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--format", "json", "-o", o)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	out := readTraceJSON(t, o)
	st, ok := row(out, "newfstatat")
	if !ok || st.Errnos["ENOENT"] != 300 || len(st.Sites) != 0 || st.LateReads == 0 || st.Unattributed != 300 {
		t.Errorf("3.10 newfstatat: %+v; want 300 ENOENT, no site, late reads counted, all unattributed (site read error %q)", st, out.SiteError)
	}
	if out.SiteKernel != 0 || out.SiteLate < st.LateReads {
		t.Errorf("3.10: in-kernel sites %d, late %d (row %d)", out.SiteKernel, out.SiteLate, st.LateReads)
	}
}

// TestTraceBPFAgreesWithPtrace: the same workload (3000 writes, 500 failing
// stats, then 4 threads started mid-trace with 200 failing stats each)
// under both engines: counts agree, the tracepoint engine's are exact, and
// the new threads' calls are at their own line (the kernel finds their
// thread state by walking the interpreter's list) — never at another one.
func TestTraceBPFAgreesWithPtrace(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	mixSite := fmt.Sprintf("stats:%d", markerLine(t, "trace_mix.py", "MIX_STAT_LINE"))
	threadSite := fmt.Sprintf("worker:%d", markerLine(t, "trace_mix.py", "THREAD_STAT_LINE"))
	args := []string{"--writes", "3000", "--stats", "500", "--threads", "4", "--thread-stats", "200", "--wait-usr1"}
	runMix := func(engine string) (traceOut, map[string]uint64) {
		tg := testutil.Start(t, py, "trace_mix.py", args...)
		o := filepath.Join(t.TempDir(), engine+".json")
		r := traceGated(t, tg, engine, engine == "tracepoint", testutil.Binary(t), "trace", "--engine", engine, "--sites", "10", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--format", "json", "-o", o)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d: %s", engine, r.Code, r.Stderr)
		}
		return readTraceJSON(t, o), targetDone(t, tg)
	}
	bo, truth := runMix("tracepoint")
	if truth["writes"] != 3000 || truth["stats"] != 500 || truth["thread_stats"] != 800 || truth["threads"] != 4 {
		t.Fatalf("target reports %v", truth)
	}
	bw, _ := row(bo, "write")
	bs, _ := row(bo, "newfstatat")
	// writes: the target's 3000 and its ELAPSED and DONE lines; the stat
	// calls and errors must be exactly the target's.
	if bs.Calls != 1300 || bs.Errnos["ENOENT"] != 1300 || bw.Calls < 3002 || bw.Calls > 3004 {
		t.Errorf("tracepoint: %d writes, %d stat calls, %v; the target made 3000 writes (+2 lines) and 1300 failing stats", bw.Calls, bs.Calls, bs.Errnos)
	}
	if bs.Sites[mixSite] != 500 || bs.Sites[threadSite]+bs.Unattributed != 800 || bs.Sites[threadSite] < 790 || len(bs.Sites) != 2 {
		t.Errorf("tracepoint sites %v, %d late, %d unattributed; want 500 at %s and the 800 of threads started mid-trace at %s (≥ 790 read in the kernel), nothing elsewhere",
			bs.Sites, bs.LateReads, bs.Unattributed, mixSite, threadSite)
	}
	if bo.Threads < 5 {
		t.Errorf("tracepoint saw %d threads, want ≥ 5", bo.Threads)
	}
	po, ptruth := runMix("ptrace")
	if ptruth["stats"]+ptruth["thread_stats"] != 1300 {
		t.Fatalf("ptrace run: target reports %v", ptruth)
	}
	pw, _ := row(po, "write")
	ps, _ := row(po, "newfstatat")
	near := func(a, b uint64) bool { return float64(max(a, b)-min(a, b)) <= 0.02*float64(max(a, b)) }
	if !near(bw.Calls, pw.Calls) || !near(bs.Calls, ps.Calls) || !near(bs.Errnos["ENOENT"], ps.Errnos["ENOENT"]) || ps.Sites[threadSite] == 0 {
		t.Errorf("engines disagree: tracepoint writes %d stats %d %v; ptrace %d %d %v (sites %v)", bw.Calls, bs.Calls, bs.Errnos, pw.Calls, ps.Calls, ps.Errnos, ps.Sites)
	}
}

// TestTraceBPFFallback: without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN
// (dropped from the bounding set; CAP_SYS_PTRACE kept) --engine auto falls
// back to ptrace and says why; --engine tracepoint names the gate (exit 4).
func TestTraceBPFFallback(t *testing.T) {
	testutil.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv (util-linux) not installed: can't drop CAP_BPF for the fallback test")
	}
	py := testutil.Find(t, "pyenv-3.12")
	drop := []string{setpriv, "--bounding-set", "-bpf,-perfmon,-sys_admin", "--", testutil.Binary(t)}
	tg := testutil.Start(t, py, "trace_mix.py", "--stats", "50", "--wait-usr1")
	o := filepath.Join(t.TempDir(), "f.json")
	r := traceGated(t, tg, "ptrace", false, append(drop, "trace", "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--format", "json", "-o", o)...)
	if r.Code != 0 {
		t.Fatalf("auto without BPF: exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "eBPF engine not available") || !strings.Contains(r.Stderr, "CAP_BPF no") || !strings.Contains(r.Stderr, "kernel.unprivileged_bpf_disabled=") {
		t.Errorf("fallback not explained: %s", r.Stderr)
	}
	out := readTraceJSON(t, o)
	st, _ := row(out, "newfstatat")
	if out.Engine != "ptrace" || !strings.Contains(out.EngineNote, "eBPF not available") || st.Errnos["ENOENT"] != 50 {
		t.Errorf("engine %q note %q, stats %+v; want ptrace with the reason and the 50 ENOENT", out.Engine, out.EngineNote, st)
	}
	idle := testutil.Start(t, py, "trace_mix.py", "--wait-usr1") // waits for ever
	r = testutil.RunCmd(t, 30*time.Second, exec.Command(drop[0], append(drop[1:], "trace", "--engine", "tracepoint", "-p", strconv.Itoa(idle.Pid), "-d", "1s")...))
	if r.Code != exitPermission || !strings.Contains(r.Stderr, "CAP_BPF") {
		t.Errorf("--engine tracepoint without BPF: exit %d, stderr %q; want %d naming CAP_BPF", r.Code, r.Stderr, exitPermission)
	}
}

// TestTraceBPFInProgress: a call still blocked when the trace ends is
// reported with the site read while it blocked (exact: it had not
// returned), by both engines (ptrace: read while the thread is stopped in
// it at the end; its sleep was interrupted by the window's own kick and
// restarted, still the same call).
func TestTraceBPFInProgress(t *testing.T) {
	testutil.RequireRoot(t)
	for _, engine := range []string{"tracepoint", "ptrace"} {
		t.Run(engine, func(t *testing.T) { traceInProgress(t, engine) })
	}
}

func traceInProgress(t *testing.T, engine string) {
	py := testutil.Find(t, "sid-3.14")
	tg := testutil.Start(t, py, "trace_mix.py", "--sleeps", "1", "--nap", "30", "--wait-usr1")
	o := filepath.Join(t.TempDir(), "p.json")
	r := traceGated(t, tg, engine, engine == "tracepoint", testutil.Binary(t), "trace", "--engine", engine, "-p", strconv.Itoa(tg.Pid), "-d", "700ms", "--format", "json", "-o", o)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		DurationS  float64 `json:"duration_s"`
		InProgress []struct {
			Tid      int     `json:"tid"`
			Name     string  `json:"name"`
			ForUS    float64 `json:"for_us"`
			Function string  `json:"function"`
			Line     int     `json:"line"`
		} `json:"in_progress"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	line := markerLine(t, "trace_mix.py", "MIX_SLEEP_LINE")
	if len(out.InProgress) != 1 {
		t.Fatalf("in progress: %+v, want the one sleep", out.InProgress)
	}
	p := out.InProgress[0]
	if p.Tid != tg.Pid || p.Name != "clock_nanosleep" || p.Function != "nap" || p.Line != line || p.ForUS <= 0 || p.ForUS > out.DurationS*1e6 {
		t.Errorf("in progress %+v; want the main thread in clock_nanosleep at nap:%d for less than the trace's %.2fs", p, line, out.DurationS)
	}
}
