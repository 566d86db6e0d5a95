package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpInterpreterIDs: the main interpreter and two sub-interpreters,
// each with a thread of its own. Threads carry the runtime's own
// interpreter id (PyInterpreterState.id: main = 0), not the interpreter's
// position in the runtime's list (newest first), 3.12+.
func TestDumpInterpreterIDs(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "subinterps.py")
			var ids []int64
			select {
			case line := <-tg.Lines:
				for _, f := range strings.Fields(strings.TrimPrefix(line, "IDS")) {
					var v int64
					fmt.Sscan(f, &v)
					ids = append(ids, v)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("target did not report its sub-interpreter ids")
			}
			if len(ids) != 2 || ids[0] == 0 || ids[1] == 0 || ids[0] == ids[1] {
				t.Fatalf("sub-interpreter ids %v", ids)
			}
			d := dumpJSON(t, "-p", fmt.Sprint(tg.Pid))
			found := map[string]int64{}
			for _, th := range d.Threads {
				for _, f := range th.Frames {
					switch f.Function {
					case "main_park":
						found["main"] = th.Interp
					case "sub_park":
						found[th.Name] = th.Interp
					}
				}
			}
			want := map[string]int64{"main": 0, fmt.Sprintf("sub-%d", ids[0]): ids[0], fmt.Sprintf("sub-%d", ids[1]): ids[1]}
			for k, v := range want {
				if got, ok := found[k]; !ok || got != v {
					t.Errorf("thread %s: interpreter %d (found %v), want %d", k, got, ok, v)
				}
			}
		})
	}
}

// subRun reads subinterp_run.py's lines: the native id of the thread
// running in_sub (INSUB) and, for spin, in_sub's and the whole thread's
// CPU time (SPUN, RUNNER) as the target's own thread_time measured them.
type subRun struct {
	tid           int
	spun, runner  float64
	haveSpun, all bool
}

func (s *subRun) line(l string) {
	f := strings.Fields(l)
	if len(f) != 2 {
		return
	}
	switch f[0] {
	case "INSUB":
		s.tid, _ = strconv.Atoi(f[1])
	case "SPUN":
		s.spun, _ = strconv.ParseFloat(f[1], 64)
		s.haveSpun = true
	case "RUNNER":
		s.runner, _ = strconv.ParseFloat(f[1], 64)
		s.all = true
	}
}

// TestRecordSubInterpreterStack: a thread of the main interpreter runs a
// sub-interpreter's in_sub(), which spins (subinterp_run.py), with a CPU
// hog beside it. The target's own thread_time says most of the thread's
// CPU went to in_sub; record must give it there — in_sub on top of the
// sub-interpreter's <module>, on top of run_sub, the main interpreter's
// call that entered it — in at least 80 % of the thread's samples, not
// to run_sub alone, 3.12+.
func TestRecordSubInterpreterStack(t *testing.T) {
	requireKernelWalker(t)
	testutil.CPUHog(t, 1)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sub.folded")
			args := append([]string{"record", "--threads", "-F", "199", "--format", "folded", "-o", out, "--"}, in.Argv...)
			args = append(args, filepath.Join(testutil.Repo(), "testdata", "targets", "subinterp_run.py"), "spin", "3")
			r := testutil.Run(t, 90*time.Second, args...)
			if r.Code != 0 {
				t.Fatalf("record: exit %d\n%s", r.Code, r.Stderr)
			}
			var truth subRun
			for _, l := range strings.Split(r.Stdout, "\n") {
				truth.line(l)
			}
			if truth.tid == 0 || !truth.haveSpun || !truth.all {
				t.Fatalf("the target did not report its run (INSUB, SPUN, RUNNER): %q", r.Stdout)
			}
			if truth.spun < 0.8*truth.runner {
				t.Fatalf("premise: in_sub took %.3fs of the thread's %.3fs of CPU (want most)", truth.spun, truth.runner)
			}
			stacks, weights := readFoldedStacks(t, out)
			root := fmt.Sprintf("subrunner (%d)", truth.tid)
			var thread, good, runSubLeaf int64
			for i, st := range stacks {
				if len(st) < 2 || st[0] != root {
					continue
				}
				thread += weights[i]
				leaf := st[len(st)-1]
				below := strings.Join(st[1:len(st)-1], ";")
				if strings.HasPrefix(leaf, "in_sub (<") && strings.Contains(below, "<module> (<") && strings.Contains(below, "run_sub (") {
					good += weights[i]
				}
				if strings.HasPrefix(leaf, "run_sub (") {
					runSubLeaf += weights[i]
				}
			}
			t.Logf("%s: thread %d: %d samples, %d with in_sub on run_sub, %d at run_sub's call; the target: in_sub %.3fs of the thread's %.3fs CPU",
				in.Label, truth.tid, thread, good, runSubLeaf, truth.spun, truth.runner)
			if thread < 50 {
				t.Fatalf("only %d samples of the spinning thread", thread)
			}
			if good*100 < thread*80 {
				t.Errorf("%d of the thread's %d samples have in_sub on top of run_sub (want ≥ 80 %%; %d end at run_sub's call)", good, thread, runSubLeaf)
			}
		})
	}
}

// TestDumpSubInterpreterThread: a thread of the main interpreter sleeps
// in a sub-interpreter's in_sub() (subinterp_run.py sleep): one OS
// thread, a thread state in each interpreter. dump lists it once — as
// many threads as /proc has — with the sub-interpreter's frames (in_sub,
// <module>) on top of run_sub and its callers, each frame saying its
// interpreter, and the text marks where the sub-interpreter's frames
// begin, 3.12+.
func TestDumpSubInterpreterThread(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "subinterp_run.py", "sleep")
			var truth subRun
			select {
			case l := <-tg.Lines:
				truth.line(l)
			case <-time.After(10 * time.Second):
				t.Fatal("target did not report in_sub's thread")
			}
			if truth.tid == 0 {
				t.Fatal("target did not report in_sub's thread")
			}
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", tg.Pid))
			if err != nil {
				t.Fatal(err)
			}
			d := dumpJSON(t, "-p", fmt.Sprint(tg.Pid))
			if len(d.Threads) != len(tasks) {
				t.Errorf("%d threads dumped, /proc lists %d", len(d.Threads), len(tasks))
			}
			var th *dump.ThreadDump
			for i := range d.Threads {
				if d.Threads[i].Tid == truth.tid {
					if th != nil {
						t.Errorf("thread %d listed twice", truth.tid)
					}
					th = &d.Threads[i]
				}
			}
			if th == nil {
				t.Fatalf("thread %d not in the dump", truth.tid)
			}
			var got []string
			for _, f := range th.Frames {
				id := "-"
				if f.Interp != nil {
					id = fmt.Sprint(*f.Interp)
				}
				got = append(got, f.Function+"@"+id)
			}
			fr := th.Frames
			ok := len(fr) >= 3 && fr[0].Function == "in_sub" && fr[1].Function == "<module>" && fr[2].Function == "run_sub"
			for i := 0; ok && i < len(fr); i++ {
				sub := i < 2
				ok = fr[i].Interp != nil && (*fr[i].Interp != 0) == sub
			}
			if !ok || th.Name != "subrunner" || th.Interp == 0 {
				t.Errorf("thread %d %q (interpreter %d): frames %v, want in_sub, <module> (a sub-interpreter) on run_sub (0) and its callers", truth.tid, th.Name, th.Interp, got)
			}
			r := testutil.Run(t, 60*time.Second, "dump", "-p", fmt.Sprint(tg.Pid))
			marker := fmt.Sprintf("  In interpreter %d:\n", th.Interp)
			i, j := strings.Index(r.Stdout, "in run_sub\n"), strings.Index(r.Stdout, marker)
			if r.Code != 0 || i < 0 || j < i || !strings.Contains(r.Stdout[j:], "in in_sub\n") || !strings.Contains(r.Stdout, fmt.Sprintf("%d threads,", len(tasks))) {
				t.Errorf("text dump: want %d threads, run_sub, then %q, then in_sub:\n%s", len(tasks), marker, r.Stdout)
			}
		})
	}
}
