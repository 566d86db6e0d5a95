//go:build amd64

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/testutil"
)

type accountTruth struct {
	Pid      int `json:"pid"`
	Switches int `json:"switches"`
	Lives    []struct {
		Tid        int
		Start, End float64
	} `json:"lives"`
}

type accountDoc struct {
	Result struct {
		WindowS  float64          `json:"window_s"`
		Switches uint64           `json:"switches"`
		BPF      *offcpu.BPFStats `json:"bpf"`
		Threads  []struct {
			Tid      int     `json:"tid"`
			Name     string  `json:"name"`
			WindowS  float64 `json:"window_s"`
			OnCPUS   float64 `json:"on_cpu_s"`
			OffCPUS  float64 `json:"off_cpu_s"`
			RunQS    float64 `json:"runqueue_s"`
			Switches uint64  `json:"switches"`
			Exited   bool    `json:"exited"`
		} `json:"threads"`
	} `json:"result"`
	Top []offcpu.TopStack `json:"top"`
}

// runAccount runs offcpu -- offcpu_account.py (extra: the script's
// flags) and returns pyobs's JSON, the program's truth and the footer.
func runAccount(t *testing.T, py testutil.Interp, engine string, extra ...string) (accountDoc, accountTruth, string) {
	t.Helper()
	dir := t.TempDir()
	truthPath, out := filepath.Join(dir, "truth"), filepath.Join(dir, "o.json")
	args := append([]string{"offcpu", "--engine", engine, "--format", "json", "-o", out, "--"}, py.Argv...)
	args = append(append(args, filepath.Join(testutil.Repo(), "testdata", "targets", "offcpu_account.py"), truthPath), extra...)
	r := testutil.Run(t, 90*time.Second, args...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var truth accountTruth
	b, err := os.ReadFile(truthPath)
	if err != nil || json.Unmarshal(b, &truth) != nil {
		t.Fatalf("no truth from the program (%v): %s", err, b)
	}
	var doc accountDoc
	if b, err = os.ReadFile(out); err != nil || json.Unmarshal(b, &doc) != nil {
		t.Fatalf("offcpu's JSON (%v): %.500s", err, b)
	}
	return doc, truth, r.Stderr
}

// TestOffcpuSwitchesOnce: a context switch is one event (a switch-out,
// later its switch-in) and is counted once. offcpu_account.py's four
// threads sleep 2 ms 400 times; truth: the switch counts each thread reads
// of itself at its end (/proc/thread-self/status, voluntary +
// nonvoluntary), summed — over the whole life of the program, which
// offcpu -- CMD observes (bpf: from its exec; perf: from when its
// interpreter is up, its threads within a scan). A CPU hog on every CPU
// beside. Before, both switch-outs and switch-ins were counted: twice the
// truth, and more than the machine's own sched_switch count allowed.
func TestOffcpuSwitchesOnce(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, runtime.NumCPU())
	py := testutil.Find(t, "pyenv-3.13")
	for _, engine := range []string{offcpu.EngineBPF, offcpu.EnginePerf} {
		t.Run(engine, func(t *testing.T) {
			doc, truth, footer := runAccount(t, py, engine)
			var perThread uint64
			for _, th := range doc.Result.Threads {
				perThread += th.Switches
			}
			got := float64(doc.Result.Switches)
			t.Logf("%s: offcpu %d switches (threads %d), the program counted %d", engine, doc.Result.Switches, perThread, truth.Switches)
			// bpf: the program's last acts after its counts (exits, the
			// holder's wait before the exec) add a few; perf misses a
			// little of the start (threads are found by a 50 ms scan).
			if math.Abs(got-float64(truth.Switches)) > 0.1*float64(truth.Switches)+60 {
				t.Errorf("offcpu counted %d switches, the program %d (want within 10 %% + 60)", doc.Result.Switches, truth.Switches)
			}
			if perThread != doc.Result.Switches {
				t.Errorf("the threads' switches add up to %d, the total is %d", perThread, doc.Result.Switches)
			}
			if b := doc.Result.BPF; engine == offcpu.EngineBPF {
				if b == nil || b.TargetOut != doc.Result.Switches || b.TargetOut > b.SchedSwitches {
					t.Fatalf("switches %d: want the target's switch-outs, no more than the machine's sched_switch count (%+v)", doc.Result.Switches, b)
				}
				// The footer's two rates: the same unit over the same window.
				m := regexp.MustCompile(`(\d+) switches \(switch-outs\) in [0-9.]+s \((\d+)/s\), machine sched_switch rate (\d+)/s`).FindStringSubmatch(footer)
				if m == nil {
					t.Fatalf("footer: %s", footer)
				}
				target, _ := strconv.ParseFloat(m[2], 64)
				machine, _ := strconv.ParseFloat(m[3], 64)
				if target > machine {
					t.Errorf("the target's %s/s exceeds the machine's %s/s", m[2], m[3])
				}
			}
		})
	}
}

// TestOffcpuExitedWindows: a thread or process that ends while observed
// has a window from when it was first seen to its exit. offcpu -- CMD
// follows offcpu_account.py's forks (children burning ~20 ms each), its
// sleeping threads and its main thread to the program's end; truth: each
// one's life as it timed itself on CLOCK_MONOTONIC, from its first line to
// its last. A CPU hog on every CPU beside. Before, the last thread of each
// process (a child's, the program's main thread) had a window of 0: its
// process left the observed set before its last switch-out.
func TestOffcpuExitedWindows(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, runtime.NumCPU())
	py := testutil.Find(t, "pyenv-3.13")
	doc, truth, _ := runAccount(t, py, offcpu.EngineBPF, "--fork", "5", "--sleeps", "100")
	rows := map[int]int{}
	for i, th := range doc.Result.Threads {
		rows[th.Tid] = i
		sum := th.OnCPUS + th.OffCPUS + th.RunQS
		t.Logf("%-12s %6d exited=%v window %.3f on %.3f off %.3f rq %.3f", th.Name, th.Tid, th.Exited, th.WindowS, th.OnCPUS, th.OffCPUS, th.RunQS)
		if sum > th.WindowS+0.005 {
			t.Errorf("thread %d: on %.3f + off %.3f + run-queue %.3f = %.3fs, more than its window %.3fs", th.Tid, th.OnCPUS, th.OffCPUS, th.RunQS, sum, th.WindowS)
		}
	}
	if len(truth.Lives) != 10 {
		t.Fatalf("the program noted %d lives, want 10", len(truth.Lives))
	}
	for _, l := range truth.Lives {
		i, ok := rows[l.Tid]
		if !ok {
			t.Errorf("no row for %d (life %.3fs)", l.Tid, l.End-l.Start)
			continue
		}
		th, life := doc.Result.Threads[i], l.End-l.Start
		// Seen from its creation (a child: its fork, before its first
		// line; the main thread: the exec, before the interpreter is up)
		// to its exit, a moment after its last line.
		t.Logf("%d: window %.3fs, lived %.3fs by its own clock", l.Tid, th.WindowS, life)
		slack := 0.1
		if l.Tid == truth.Pid {
			slack = 0.6
		}
		if !th.Exited || th.WindowS < life-0.002 || th.WindowS > life+slack {
			t.Errorf("%d: exited %v, window %.3fs; it lived %.3fs (want %.3f..+%.1fs)", l.Tid, th.Exited, th.WindowS, life, life, slack)
		}
	}
}

// TestOffcpuPercentOfOffCPU: every row of the top stacks is a share of
// one whole, the off-CPU time in the profile (blocked and run-queue), and
// the heading says so: for a CPU-bound target beside a CPU hog on every
// CPU (nearly all of its off-CPU time is run-queue), no row exceeds 100 %
// and all rows add up to 100 %. Truth: the target burns CPU and never
// blocks (spin_main.py: one thread); its rows' seconds are pyobs's. Before, run-queue
// rows were divided by the blocked time alone: hundreds of thousands of %.
func TestOffcpuPercentOfOffCPU(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, runtime.NumCPU())
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "spin_main.py")
	go func() {
		for range tg.Lines {
		}
	}()
	time.Sleep(200 * time.Millisecond)
	for _, engine := range []string{offcpu.EngineBPF, offcpu.EnginePerf} {
		t.Run(engine, func(t *testing.T) {
			pid := fmt.Sprint(tg.Pid)
			r := testutil.Run(t, 60*time.Second, "offcpu", "-p", pid, "-d", "1s", "--engine", engine, "--format", "json")
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			var doc accountDoc
			if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
				t.Fatalf("json: %v", err)
			}
			var sum, rq float64
			for _, s := range doc.Top {
				sum += s.Percent
				if strings.HasPrefix(s.Class, "run-queue") {
					rq += float64(s.US) / 1e6
				}
				if s.Percent > 100 {
					t.Errorf("%.1f %% %s %.3fs: more than the whole", s.Percent, s.Class, float64(s.US)/1e6)
				}
			}
			t.Logf("%s: %d rows, %.1f %% in all, %.3fs of run-queue", engine, len(doc.Top), sum, rq)
			if rq < 0.05 {
				t.Fatalf("only %.3fs of run-queue beside the hogs: the test cannot tell", rq)
			}
			if len(doc.Top) < 50 && math.Abs(sum-100) > 0.5 {
				t.Errorf("the %d rows add up to %.1f %%, want 100 %%", len(doc.Top), sum)
			}
			txt := testutil.Run(t, 60*time.Second, "offcpu", "-p", pid, "-d", "500ms", "--engine", engine)
			if txt.Code != 0 || !strings.Contains(txt.Stdout, "(% of off-CPU time in the profile, blocked and run-queue;") {
				t.Errorf("text heading: exit %d: %s", txt.Code, txt.Stdout)
			}
			for _, m := range regexp.MustCompile(`(?m)^\s+([0-9.]+) %  `).FindAllStringSubmatch(txt.Stdout, -1) {
				if v, _ := strconv.ParseFloat(m[1], 64); v > 100 {
					t.Errorf("text row at %s %%: %s", m[1], txt.Stdout)
				}
			}
		})
	}
}
