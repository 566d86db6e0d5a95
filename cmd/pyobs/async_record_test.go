package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// asyncFolded parses folded output into (stack, weight) pairs.
func asyncFolded(t *testing.T, out string) (stacks []string, weights []int64, total int64) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			t.Fatalf("not a folded line: %q", l)
		}
		w, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("not a folded line: %q", l)
		}
		stacks, weights = append(stacks, l[:i]), append(weights, w)
		total += w
	}
	return stacks, weights, total
}

// TestRecordAsyncRootsAtTask: asyncio_tree.py's CPU-bound task ("cpu",
// awaited by "root", as the target's own asyncio.capture_call_graph says)
// spins in a sync call. With --async ≥ 90 % of the samples in its spin are
// rooted at "[task] root;[task] cpu;cpu_body", none keep the event loop's
// frames; without --async the same samples are rooted at the loop (so the
// check can fail).
func TestRecordAsyncRootsAtTask(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"sid-3.14", "sid-3.15"} {
		t.Run(label, func(t *testing.T) {
			in := testutil.Find(t, label)
			tg := testutil.Start(t, in, "asyncio_tree.py")
			var truth taskTruth
			if err := json.Unmarshal([]byte(readTaskTruthLine(t, tg)), &truth); err != nil {
				t.Fatal(err)
			}
			byID := map[uint64]int{}
			for i, x := range truth.Tasks {
				byID[x.ID] = i
			}
			// The running task and its awaiter chain, outermost first.
			var chain []string
			for _, x := range truth.Tasks {
				if !x.Running {
					continue
				}
				for n := 0; n < 10; n++ {
					if x.Name == nil {
						t.Fatalf("unnamed task on the running chain")
					}
					chain = append([]string{"[task] " + *x.Name}, chain...)
					if len(x.AwaitedBy) != 1 {
						break
					}
					j, ok := byID[x.AwaitedBy[0]]
					if !ok {
						break
					}
					x = truth.Tasks[j]
				}
			}
			if strings.Join(chain, ";") != "[task] root;[task] cpu" {
				t.Fatalf("target reports the running chain %v, want root → cpu", chain)
			}
			prefix := strings.Join(chain, ";") + ";cpu_body ("

			r := testutil.Run(t, 30*time.Second, "record", "--async", "-p", fmt.Sprint(tg.Pid), "-d", "1500ms", "-F", "499", "--format", "folded")
			if r.Code != 0 {
				t.Fatalf("record --async: exit %d: %s", r.Code, r.Stderr)
			}
			stacks, weights, total := asyncFolded(t, r.Stdout)
			var spin, rooted int64
			for i, s := range stacks {
				if !strings.Contains(s, ";spin (") {
					continue
				}
				spin += weights[i]
				if strings.HasPrefix(s, prefix) {
					rooted += weights[i]
				}
				if strings.Contains(s, "run_forever") || strings.Contains(s, "run_until_complete") {
					t.Errorf("event loop frames under --async: %s", s)
				}
			}
			t.Logf("%d of %d samples in spin rooted at %q (%d samples in all); %s", rooted, spin, prefix, total, lastLine(r.Stderr))
			if spin < 30 { // under load the target may get little CPU, but not none
				t.Fatalf("only %d of %d samples in the CPU-bound task's spin:\n%s", spin, total, r.Stdout)
			}
			if rooted*10 < spin*9 {
				t.Errorf("%d of %d spin samples rooted at the task chain (< 90 %%):\n%s", rooted, spin, r.Stdout)
			}
			if !strings.Contains(r.Stderr, "pyobs record --async: ") {
				t.Errorf("no --async account on stderr: %s", r.Stderr)
			}

			// Without --async the spin is under the event loop.
			r = testutil.Run(t, 30*time.Second, "record", "-p", fmt.Sprint(tg.Pid), "-d", "300ms", "-F", "499", "--format", "folded")
			if r.Code != 0 || strings.Contains(r.Stdout, "[task] ") || !strings.Contains(r.Stdout, "run_forever") {
				t.Errorf("plain record: exit %d, want loop frames and no task frames:\n%s", r.Code, r.Stdout)
			}
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestRecordAsyncTwoTasks: two CPU-bound tasks take turns every few ms
// (asyncio_two_cpu.py; one named, one left Task-N); each measures its own
// CPU time. Samples in each
// task's body must be rooted at that task (≥ 90 %: a turn may end between
// the sample and the read), and the tasks' shares of the samples must match
// their shares of the CPU time they measured, within 10 points.
func TestRecordAsyncTwoTasks(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.15")
	tg := testutil.Start(t, in, "asyncio_two_cpu.py")
	burned := func() map[string]float64 {
		var m map[string]float64
		select {
		case l := <-tg.Lines:
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("target line %q: %v", l, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("target reports nothing")
		}
		return m
	}
	b0 := burned()
	// The unnamed task's name ("Task-N", an int inside the task), as the
	// tree read (a different decoder from the sampler's) shows it.
	light := ""
	for _, x := range tasksJSON(t, "-p", fmt.Sprint(tg.Pid)).Tasks {
		if len(x.Coroutines) > 0 && x.Coroutines[0].Function == "light_body" {
			light = x.Name
		}
	}
	if !anonTask.MatchString(light) {
		t.Fatalf("light_body's task is named %q in dump --tasks, want Task-N", light)
	}
	names := map[string]string{"heavy": "heavy", "light": light}
	r := testutil.Run(t, 30*time.Second, "record", "--async", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-F", "499", "--format", "folded")
	if r.Code != 0 {
		t.Fatalf("record --async: exit %d: %s", r.Code, r.Stderr)
	}
	for len(tg.Lines) > 0 {
		<-tg.Lines
	}
	b1 := burned()
	stacks, weights, _ := asyncFolded(t, r.Stdout)
	in_, ok := map[string]int64{}, map[string]int64{}
	for i, s := range stacks {
		for _, task := range []string{"heavy", "light"} {
			if strings.Contains(s, task+"_body (") && strings.Contains(s, ";burn (") {
				in_[task] += weights[i]
				if strings.HasPrefix(s, "[task] root;[task] "+names[task]+";"+task+"_body (") {
					ok[task] += weights[i]
				}
			}
		}
	}
	h, l := b1["heavy"]-b0["heavy"], b1["light"]-b0["light"]
	want := h / (h + l)
	got := float64(ok["heavy"]) / float64(max(ok["heavy"]+ok["light"], 1))
	t.Logf("heavy: %d/%d rooted, light: %d/%d rooted; heavy's share: %.2f of samples, %.2f of the CPU the target measured; %s",
		ok["heavy"], in_["heavy"], ok["light"], in_["light"], got, want, lastLine(r.Stderr))
	for _, task := range []string{"heavy", "light"} {
		if in_[task] < 20 || ok[task]*10 < in_[task]*9 {
			t.Errorf("%s: %d of %d burn samples rooted at its task", task, ok[task], in_[task])
		}
	}
	// Sampling noise: 3 binomial standard deviations, at least 0.1.
	n := float64(ok["heavy"] + ok["light"])
	tol := max(0.1, 3*math.Sqrt(want*(1-want)/max(n, 1)))
	if got < want-tol || got > want+tol {
		t.Errorf("heavy has %.2f of the task-rooted samples, but burned %.2f of the CPU (target's own thread_time; tolerance %.2f)", got, want, tol)
	}
}

// TestRecordAsyncBefore314: before 3.14 there is no per-thread running
// task: one line, exit 5. --async with --native: usage error (exit 2).
func TestRecordAsyncBefore314(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.13")
	tg := testutil.Start(t, in, "asyncio_tree.py")
	r := testutil.Run(t, 30*time.Second, "record", "--async", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "--format", "folded")
	if r.Code != 5 || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 ||
		!strings.Contains(r.Stderr, "record --async needs CPython 3.14+") || !strings.Contains(r.Stderr, "this is 3.13") {
		t.Errorf("exit %d, stderr %q, stdout %q", r.Code, r.Stderr, r.Stdout)
	}
	// Not with --native yet: a usage error before anything is attached.
	r = testutil.Run(t, 30*time.Second, "record", "--async", "--native", "-p", fmt.Sprint(tg.Pid), "-d", "1s")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--async does not combine with --native") {
		t.Errorf("--async --native: exit %d, stderr %q", r.Code, r.Stderr)
	}
}
