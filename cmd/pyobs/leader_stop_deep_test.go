package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/mem"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// targetLine is the first line a target prints after READY.
func targetLine(t *testing.T, tg *testutil.Target) string {
	t.Helper()
	select {
	case l := <-tg.Lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d printed nothing after READY", tg.Pid)
	}
	return ""
}

// taskStates is each thread's state letter, from /proc.
func taskStates(t *testing.T, pid int) map[int]string {
	t.Helper()
	fs := procfs.Default()
	tids, err := fs.Tasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, tid := range tids {
		if st, err := fs.TaskStat(pid, tid); err == nil {
			out[tid] = st.State
		}
	}
	return out
}

// waitStates polls until every thread of pid is in state want (true) or
// until 5 s have passed (false).
func waitStates(t *testing.T, pid int, ok func(tid int, state string) bool) bool {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		sts := taskStates(t, pid)
		all := len(sts) > 0
		for tid, s := range sts {
			all = all && ok(tid, s)
		}
		if all {
			return true
		}
	}
	return false
}

type dumpReadJSON struct {
	Pid  int `json:"pid"`
	Read struct {
		Method         string `json:"method"`
		AlreadyStopped bool   `json:"already_stopped"`
		Torn           int    `json:"threads_inconsistent"`
	} `json:"read"`
	Threads []struct {
		Tid        int    `json:"tid"`
		Name       string `json:"name"`
		Consistent bool   `json:"consistent"`
		Truncated  bool   `json:"truncated"`
		Error      string `json:"error"`
		Frames     []struct {
			Function string `json:"function"`
			Line     int    `json:"line"`
		} `json:"frames"`
	} `json:"threads"`
}

func runDumpJSON(t *testing.T, args ...string) dumpReadJSON {
	t.Helper()
	r := testutil.Run(t, time.Minute, append([]string{"dump", "--format", "json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("dump %v: exit %d: %s", args, r.Code, r.Stderr)
	}
	var d dumpReadJSON
	if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
		t.Fatalf("dump %v: json: %v\n%s", args, err, r.Stdout)
	}
	return d
}

// TestLeaderExited: a process whose main thread ended with pthread_exit
// while a worker runs Python on is alive: dump reads it (the worker's
// stack, truth: the tid the target printed and the function it runs),
// stat, record, mem and trace observe it; -p of the worker's tid is refused with a
// line naming the process. The leader's zombie state is the target's own
// account from /proc.
func TestLeaderExited(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "leader_exit.py")
	worker, err := strconv.Atoi(targetLine(t, tg))
	if err != nil {
		t.Fatal(err)
	}
	if !waitStates(t, tg.Pid, func(tid int, s string) bool { return tid != tg.Pid || s == "Z" }) {
		t.Fatalf("pid %d: its main thread did not exit: %v", tg.Pid, taskStates(t, tg.Pid))
	}
	pid := fmt.Sprint(tg.Pid)

	for _, lock := range []bool{false, true} {
		args := []string{"-p", pid}
		if lock {
			args = append(args, "--lock")
		}
		name := "dump"
		if lock {
			name += " --lock"
		}
		t.Run(name, func(t *testing.T) {
			d := runDumpJSON(t, args...)
			if d.Pid != tg.Pid {
				t.Errorf("pid %d, want %d", d.Pid, tg.Pid)
			}
			found := false
			for _, th := range d.Threads {
				if th.Tid != worker {
					continue
				}
				for _, f := range th.Frames {
					found = found || f.Function == "worker_loop"
				}
			}
			if !found {
				t.Errorf("no thread %d in worker_loop: %+v", worker, d.Threads)
			}
		})
	}

	t.Run("stat", func(t *testing.T) {
		r := testutil.Run(t, time.Minute, "stat", "-p", pid, "-d", "500ms", "--format", "json")
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		var st struct {
			Pid int `json:"pid"`
			CPU struct {
				User float64 `json:"user_s"`
			} `json:"cpu"`
			Memory struct {
				RSS int64 `json:"rss_bytes"`
			} `json:"memory"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatalf("json: %v", err)
		}
		if st.Pid != tg.Pid || st.CPU.User <= 0 || st.Memory.RSS <= 0 {
			t.Errorf("pid %d, user %.3fs, rss %d: want pid %d, the worker's CPU and the process's memory", st.Pid, st.CPU.User, st.Memory.RSS, tg.Pid)
		}
	})

	t.Run("record", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "le.folded")
		r := testutil.Run(t, time.Minute, "record", "-p", pid, "-d", "1s", "--format", "folded", "-o", out)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "worker_loop") {
			t.Errorf("no worker_loop sample:\n%s", b)
		}
	})

	// offcpu: the zombie leader has no wait (it died before the window):
	// none of its time, and not its last stack, is in the profile.
	t.Run("offcpu", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "le.folded")
		r := testutil.Run(t, time.Minute, "offcpu", "--engine", "bpf", "-p", pid, "-d", "1s", "--format", "folded", "-o", out)
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "<module>") || !strings.Contains(string(b), "worker_loop") {
			t.Errorf("the dead leader's stack is a wait, or the worker's waits are missing:\n%s", b)
		}
	})

	t.Run("mem", func(t *testing.T) {
		// The kernel refuses a uprobe on the zombie leader (ESRCH): the
		// probes go on a live thread, which shares the process's memory.
		// The worker allocates an int per step (20,000 per loop, freed at
		// once): the probes must see tens of thousands of calls.
		r := testutil.Run(t, time.Minute, "mem", "-p", pid, "-d", "1s")
		calls := 0
		if i := strings.Index(r.Stdout, "cost: "); i >= 0 {
			_, _ = fmt.Sscanf(r.Stdout[i:], "cost: %d allocator calls", &calls)
		}
		if r.Code != 0 || calls < 10000 || strings.Contains(r.Stderr+r.Stdout, "unavailable") {
			t.Errorf("exit %d, %d allocator calls seen:\n%s\n%s", r.Code, calls, r.Stdout, r.Stderr)
		}
	})

	t.Run("trace ptrace", func(t *testing.T) {
		r := testutil.Run(t, time.Minute, "trace", "--engine", "ptrace", "-p", pid, "-d", "1s")
		if r.Code != 0 || !strings.Contains(r.Stdout, "worker_loop") {
			t.Errorf("exit %d, no worker_loop call site:\n%s\n%s", r.Code, r.Stdout, r.Stderr)
		}
	})

	t.Run("dump -p thread", func(t *testing.T) {
		r := testutil.Run(t, time.Minute, "dump", "-p", fmt.Sprint(worker))
		want := fmt.Sprintf("give -p %d", tg.Pid)
		if r.Code != exitUsage || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, want) {
			t.Errorf("dump -p %d (a thread): exit %d, stderr %q: want exit %d and one line saying %q", worker, r.Code, r.Stderr, exitUsage, want)
		}
	})
}

// deepTarget starts deep_stop.py and returns its own count of its frames
// and the line it waits on.
func deepTarget(t *testing.T, depth int, mode string) (*testutil.Target, int, int) {
	t.Helper()
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "deep_stop.py", fmt.Sprint(depth), mode)
	t.Cleanup(func() { _ = syscall.Kill(tg.Pid, syscall.SIGCONT) })
	var n, line int
	if _, err := fmt.Sscan(targetLine(t, tg), &n, &line); err != nil {
		t.Fatal(err)
	}
	if mode == "spin" {
		time.Sleep(200 * time.Millisecond) // out of its print, into the loop
	}
	return tg, n, line
}

// TestDumpLockJobStopped: dump --lock (and --native) of a process stopped
// by SIGSTOP reads it, says it was already stopped, and leaves every thread
// stopped (state T in /proc, still after a while). The stack is the one the
// target printed before stopping itself: its depth and the kill's line.
func TestDumpLockJobStopped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	tg, n, line := deepTarget(t, 20, "stop")
	stopped := func(_ int, s string) bool { return s == "T" }
	if !waitStates(t, tg.Pid, stopped) {
		t.Fatalf("pid %d did not stop itself", tg.Pid)
	}
	for _, extra := range []string{"--lock", "--native"} {
		d := runDumpJSON(t, "-p", fmt.Sprint(tg.Pid), extra)
		if !d.Read.AlreadyStopped || d.Read.Method != "ptrace-stopped" {
			t.Errorf("%s: read %+v: want ptrace-stopped, already_stopped", extra, d.Read)
		}
		if len(d.Threads) != 1 {
			t.Fatalf("%s: %d threads, want 1", extra, len(d.Threads))
		}
		th := d.Threads[0]
		var py []int
		for i, f := range th.Frames {
			if f.Line > 0 && (f.Function == "bottom" || f.Function == "rec" || f.Function == "<module>") {
				py = append(py, i)
			}
		}
		if !th.Consistent || len(py) != n || th.Frames[py[0]].Function != "bottom" || th.Frames[py[0]].Line != line {
			t.Errorf("%s: consistent %v, %d Python frames, innermost %+v: want %d frames, bottom at line %d", extra, th.Consistent, len(py), th.Frames[py[0]], n, line)
		}
		time.Sleep(100 * time.Millisecond)
		if sts := taskStates(t, tg.Pid); sts[tg.Pid] != "T" {
			t.Fatalf("%s: the target is %v after the dump: it must stay stopped (T)", extra, sts)
		}
	}
}

// TestDumpDeepTruncated: a stack deeper than the walker goes is read as
// its innermost frames marked truncated, not as a torn read; one within
// it is read whole. Truth: the target's own count of its frames and the
// line it waits on. Read running, and with --lock while it stopped itself.
func TestDumpDeepTruncated(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	check := func(name string, d dumpReadJSON, n, line int) {
		t.Helper()
		if len(d.Threads) != 1 {
			t.Fatalf("%s: %d threads", name, len(d.Threads))
		}
		th := d.Threads[0]
		want := min(n, pyframes.MaxDepth)
		if len(th.Frames) == 0 || th.Frames[0].Function != "bottom" || th.Frames[0].Line != line {
			t.Fatalf("%s: innermost frame %v, want bottom at line %d", name, th.Frames[:min(1, len(th.Frames))], line)
		}
		if !th.Consistent || th.Error != "" || th.Truncated != (n > pyframes.MaxDepth) || len(th.Frames) != want || d.Read.Torn != 0 {
			t.Errorf("%s: consistent %v, truncated %v, %d frames, error %q, %d inconsistent: want consistent, truncated %v, %d frames (the target has %d)",
				name, th.Consistent, th.Truncated, len(th.Frames), th.Error, d.Read.Torn, n > pyframes.MaxDepth, want, n)
		}
	}
	for _, depth := range []int{100, 6000} {
		tg, n, line := deepTarget(t, depth, "spin")
		check(fmt.Sprintf("depth %d", depth), runDumpJSON(t, "-p", fmt.Sprint(tg.Pid)), n, line)
	}
	tg, n, line := deepTarget(t, 6000, "stop")
	if !waitStates(t, tg.Pid, func(_ int, s string) bool { return s == "T" }) {
		t.Fatalf("pid %d did not stop itself", tg.Pid)
	}
	check("depth 6000 stopped, --lock", runDumpJSON(t, "-p", fmt.Sprint(tg.Pid), "--lock"), n, line)
}

// TestRecordDeepTruncated: on the perf engine (stacks read from user
// space), a stack deeper than the walker goes is folded as its innermost
// frames under [truncated stack], not dropped as unreadable. Truth: the
// target's own frame count and the line it spins on.
func TestRecordDeepTruncated(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	tg, n, line := deepTarget(t, 6000, "spin")
	if n <= pyframes.MaxDepth {
		t.Fatalf("the target has %d frames: not deeper than %d", n, pyframes.MaxDepth)
	}
	out := filepath.Join(t.TempDir(), "deep.folded")
	r := testutil.Run(t, time.Minute, "record", "--engine", "perf", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "--format", "folded", "-o", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	bottom := fmt.Sprintf("bottom (%s:%d)", filepath.Join(testutil.Repo(), "testdata", "targets", "deep_stop.py"), line)
	deep := 0
	for _, l := range lines {
		stack := l[:max(strings.LastIndex(l, " "), 0)] // the count follows the last space
		fr := strings.Split(stack, ";")
		if len(fr) == 1 && (fr[0] == "[late read]" || fr[0] == "[torn read]") {
			continue // a read the sampler itself set aside (a busy machine): not a stack
		}
		deep++
		if fr[0] != "[truncated stack]" || len(fr)-1 != pyframes.MaxDepth || fr[len(fr)-1] != bottom {
			t.Errorf("folded stack: root %q, %d frames, leaf %q: want [truncated stack], %d frames, %q",
				fr[0], len(fr)-1, fr[len(fr)-1], pyframes.MaxDepth, bottom)
		}
	}
	if deep == 0 {
		t.Errorf("no stack folded:\n%s", b)
	}
}

// TestMemLeaderExitsMidWindow: mem's probes are opened on the main thread,
// and the kernel fires them for its memory only while it lives. The target
// ends its main thread (pthread_exit) 3 s after it starts, inside an 8 s
// window (pyobs loads in ~1 s), while its worker allocates on: the probes
// are opened again on the worker, the report says so, and the window
// counts its whole length (before, it counted only its first part, and
// then it ended there).
func TestMemLeaderExitsMidWindow(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	// Two targets side by side, the same work: one whose leader lives on
	// (the control), one whose leader exits 3 s after READY.
	ctl := testutil.Start(t, in, "leader_exit.py", "100")
	tg := testutil.Start(t, in, "leader_exit.py", "3")
	worker, err := strconv.Atoi(targetLine(t, tg))
	if err != nil {
		t.Fatalf("worker's native id: %v", err)
	}
	type memRes struct {
		WindowS float64          `json:"window_s"`
		Ended   string           `json:"probes_ended"`
		Moved   []mem.ProbesMove `json:"probes_moved"`
		Probe   struct {
			Calls uint64 `json:"calls"`
		} `json:"probe"`
	}
	run := func(pid int, out *memRes, done chan<- error) {
		var err error = fmt.Errorf("pid %d: pyobs mem did not finish", pid)
		defer func() { done <- err }() // also when Run fails the test (Goexit)
		r := testutil.Run(t, time.Minute, "mem", "-p", fmt.Sprint(pid), "-d", "8s", "--format", "json")
		if r.Code != 0 {
			err = fmt.Errorf("pid %d: exit %d: %s", pid, r.Code, r.Stderr)
		} else if e := json.Unmarshal([]byte(r.Stdout), out); e != nil {
			err = fmt.Errorf("pid %d: json: %v\n%s", pid, e, r.Stdout)
		} else {
			err = nil
		}
	}
	var c, x memRes
	done := make(chan error, 2)
	go run(ctl.Pid, &c, done)
	go run(tg.Pid, &x, done)
	errs := []error{<-done, <-done} // both runs over before the test may end
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !waitStates(t, tg.Pid, func(tid int, s string) bool { return tid != tg.Pid || s == "Z" }) {
		t.Fatalf("pid %d: its main thread did not exit: %v", tg.Pid, taskStates(t, tg.Pid))
	}
	// The probes move to the worker when the leader ends, and the window
	// runs its length; their calls keep up with the control's (probes
	// that died with the leader counted ~3/8 of them).
	if x.Ended != "" || len(x.Moved) != 1 || x.Moved[0].From != tg.Pid || x.Moved[0].To != worker || x.WindowS < 7.5 {
		t.Errorf("window %.2f s, probes_moved %+v, probes_ended %q: want the probes moved from thread %d to the worker %d and the whole window", x.WindowS, x.Moved, x.Ended, tg.Pid, worker)
	}
	if len(x.Moved) == 1 && (x.Moved[0].GapS <= 0 || x.Moved[0].GapS > 0.5) {
		t.Errorf("probes moved with a gap of at most %.3f s: want (0, 0.5 s]", x.Moved[0].GapS)
	}
	t.Logf("calls: %d with the leader exiting, %d for the control; moved %+v", x.Probe.Calls, c.Probe.Calls, x.Moved)
	if c.Probe.Calls == 0 || float64(x.Probe.Calls) < 0.6*float64(c.Probe.Calls) {
		t.Errorf("%d allocator calls counted with the leader exiting 3 s in, %d for the control: want at least 60 %% of it", x.Probe.Calls, c.Probe.Calls)
	}
}
