package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
	"github.com/pyobs/pyobs/internal/top"
)

// topTarget burns CPU in hot_alpha (three quarters) and in a function with
// a long name (a quarter), with a sleeping thread beside them.
const topTarget = `import threading, time
def hot_alpha():
    x = 0
    for i in range(30000): x += i
def a_function_with_a_rather_long_name_to_leave_characters_behind_when_a_shorter_line_replaces_it():
    x = 0
    for i in range(10000): x += i
def idle():
    while True: time.sleep(0.05)
threading.Thread(target=idle, name="sleeper", daemon=True).start()
print("READY", flush=True)
while True:
    hot_alpha()
    a_function_with_a_rather_long_name_to_leave_characters_behind_when_a_shorter_line_replaces_it()
`

func startTopTarget(t *testing.T, label string) *testutil.Target {
	t.Helper()
	in := testutil.Find(t, label)
	script := filepath.Join(t.TempDir(), "top_target.py")
	if err := os.WriteFile(script, []byte(topTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	return testutil.StartArgv(t, append(append([]string{}, in.Argv...), script), 30*time.Second)
}

// TestTopTmux runs pyobs top in a real terminal (a detached tmux session of
// 120x30) and reads the screen as a person would: the hot function first
// within 3 s, the sort keys, pause, quit; every row is whole (no half-drawn
// line, nothing left over from a longer earlier line).
func TestTopTmux(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		testutil.Skip(t, "no tmux to run top in a terminal (Debian: apt-get install -y tmux)")
	}
	bin := testutil.Binary(t)
	tg := startTopTarget(t, "pyenv-3.12")
	name := "pyobs-top-" + strconv.Itoa(os.Getpid())
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	// pyobs's stderr goes to a file: said with the screen when the test fails.
	errFile := filepath.Join(t.TempDir(), "stderr")
	start := time.Now()
	tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "30", bin+" top -p "+strconv.Itoa(tg.Pid)+" 2>"+errFile+"; echo pyobs exited $?; sleep 600")
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", name, "kill-server").Run() })
	wholeRow := regexp.MustCompile(`^\S+ \(/\S+\.py\)$`)
	row := regexp.MustCompile(`^ *\d+\.\d% +\d+\.\d% +\d+\.\d\d +\d+\.\d\d  (\S.*)$`)
	// shown is a pane for a failure's message: its lines without the
	// blank ones below, then pyobs's stderr, then when (the reason comes
	// last, where a log's tail shows it).
	shown := func(pane string) string {
		errs, _ := os.ReadFile(errFile)
		return fmt.Sprintf("%s\n--- pyobs stderr:\n%s--- %v after start:", strings.TrimRight(pane, " \n"), errs, time.Since(start).Round(time.Millisecond))
	}
	// screen returns the pane's function rows, after checking every line.
	screen := func() (string, []string) {
		pane := tmux("capture-pane", "-p", "-t", name)
		var fns []string
		for _, l := range strings.Split(strings.TrimRight(pane, "\n"), "\n") {
			if m := row.FindStringSubmatch(l); m != nil {
				// Whole: ends with its file (the script's, or threading.py's
				// for the sleeping thread's callers when it had a sample),
				// or was cut at the pane's width.
				cut := len([]rune(l)) == 120 && strings.HasPrefix(m[1], "a_function_with_a_rather_long_name")
				if !wholeRow.MatchString(m[1]) && !cut {
					t.Errorf("pane:\n%s row not whole (left-over or half-drawn): %q", shown(pane), l)
				}
				fns = append(fns, m[1])
			}
		}
		return pane, fns
	}
	var pane string
	var fns []string
	for {
		pane, fns = screen()
		if len(fns) > 0 && strings.HasPrefix(fns[0], "hot_alpha (") {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("%s hot_alpha is not the first function", shown(pane))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("hot function first after %v", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{"pyobs top · pid " + strconv.Itoa(tg.Pid), "samples/s", "observer CPU", "target CPU", "MainThread"} {
		if !strings.Contains(pane, want) {
			t.Errorf("%s the screen lacks %q", shown(pane), want)
		}
	}
	// waitFor sends a key and waits for the screen to say so.
	waitFor := func(key, want string, ok func([]string) bool) []string {
		t.Helper()
		tmux("send-keys", "-t", name, key)
		deadline := time.Now().Add(5 * time.Second)
		for {
			pane, fns := screen()
			if strings.Contains(pane, want) && (ok == nil || ok(fns)) {
				return fns
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after key %q the screen does not show %q", shown(pane), key, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("n", "sorted by name", func(fns []string) bool {
		return len(fns) >= 3 && strings.HasPrefix(fns[0], "<module> (") && strings.HasPrefix(fns[1], "a_function_with") && strings.HasPrefix(fns[2], "hot_alpha (")
	})
	waitFor("t", "sorted by total", func(fns []string) bool { return len(fns) > 1 && strings.HasPrefix(fns[0], "<module> (") })
	waitFor("h", "── MainThread (", func(fns []string) bool { return len(fns) > 0 && strings.HasPrefix(fns[0], "<module> (") })
	waitFor("h", "sorted by total", func(fns []string) bool {
		pane, _ := screen()
		return !strings.Contains(pane, "── ")
	})
	waitFor("p", "PAUSED", nil)
	before, _ := screen()
	time.Sleep(2500 * time.Millisecond)
	if after, _ := screen(); after != before {
		t.Errorf("%s\n---\n%s paused, the screen still changed", before, shown(after))
	}
	waitFor("o", "sorted by own", func(fns []string) bool { return len(fns) > 0 && strings.HasPrefix(fns[0], "hot_alpha (") })
	tmux("send-keys", "-t", name, "q")
	// Back on the shell's screen (the alternate screen left), with its status.
	deadline := time.Now().Add(5 * time.Second)
	for {
		pane := tmux("capture-pane", "-p", "-t", name)
		if strings.Contains(pane, "pyobs exited 0") && !strings.Contains(pane, "pyobs top · pid") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s q did not end pyobs top with status 0 and restore the screen", shown(pane))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := tg.Cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the target did not survive top's q: %v", err)
	}
}

// TestTopJSONLines: on a pipe, one JSON object per line per interval, the
// hot function first (cpu mode), the sleeping thread seen in wall mode.
func TestTopJSONLines(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			tg := startTopTarget(t, label)
			for _, mode := range []string{"cpu", "wall"} {
				r := testutil.Run(t, 30*time.Second, "top", "-p", strconv.Itoa(tg.Pid), "-d", "2500ms", "--mode", mode)
				if r.Code != 0 {
					t.Fatalf("%s: exit %d: %s", mode, r.Code, r.Stderr)
				}
				lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
				if len(lines) < 2 {
					t.Fatalf("%s: %d lines, want one per second and a last one:\n%s", mode, len(lines), r.Stdout)
				}
				var sn top.Snapshot
				if err := json.Unmarshal([]byte(lines[0]), &sn); err != nil {
					t.Fatalf("%s: line 1 is not JSON: %v: %s", mode, err, lines[0])
				}
				if sn.Pid != tg.Pid || sn.Mode != mode || sn.Samples == 0 || len(sn.Functions) == 0 {
					t.Fatalf("%s: first snapshot: %+v", mode, sn)
				}
				if mode == "cpu" && sn.Functions[0].Function != "hot_alpha" {
					t.Errorf("cpu: first function %q, want hot_alpha: %s", sn.Functions[0].Function, lines[0])
				}
				if mode == "wall" && !strings.Contains(lines[0], `"function":"idle"`) || !strings.Contains(lines[0], "sleeper") && mode == "wall" {
					t.Errorf("wall: the sleeping thread's idle is not in %s", lines[0])
				}
				if !strings.Contains(lines[len(lines)-1], `"final":true`) {
					t.Errorf("%s: the last line is not marked final: %s", mode, lines[len(lines)-1])
				}
			}
		})
	}
}

// TestTopSpawned: top -- CMD follows the program to its end and passes
// its status on.
func TestTopSpawned(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	code := "import time\nt = time.time()\ndef spin():\n    while time.time() - t < 3: pass\nspin()\nraise SystemExit(3)"
	r := testutil.Run(t, 30*time.Second, append(append([]string{"top", "--"}, in.Argv...), "-c", code)...)
	if r.Code != 3 {
		t.Fatalf("exit %d, want the program's 3: %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], `"function":"spin"`) || !strings.Contains(lines[len(lines)-1], `"final":true`) {
		t.Errorf("JSON lines:\n%s", r.Stdout)
	}
}

func TestTopUsage(t *testing.T) {
	for _, args := range [][]string{{"top", "-p", "1", "-o", "x.json"}, {"top", "-p", "1", "--mode", "nope"}, {"top", "-p", "1", "-F", "0"}, {"top", "-p", "1", "--format", "svg"}} {
		if r := testutil.Run(t, 10*time.Second, args...); r.Code != exitUsage || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line", args, r.Code, r.Stderr, exitUsage)
		}
	}
}

// cpuTruth samples a process's CPU time from /proc/PID/schedstat (its
// leader thread's run time in ns: a one-thread target's whole CPU) every
// 2 ms, with the time of each reading, until the file is gone or stop
// (and once after it).
type cpuTruth struct {
	mu   sync.Mutex
	at   []time.Time
	ns   []int64
	stop chan struct{}
	done chan struct{}
}

func sampleCPU(t *testing.T, pid int) *cpuTruth {
	t.Helper()
	c := &cpuTruth{stop: make(chan struct{}), done: make(chan struct{})}
	path := fmt.Sprintf("/proc/%d/schedstat", pid)
	read := func() (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n, err == nil
	}
	n, ok := read()
	if !ok {
		t.Fatalf("can't read %s", path)
	}
	c.at, c.ns = []time.Time{time.Now()}, []int64{n}
	go func() {
		defer close(c.done)
		for stopped := false; !stopped; {
			select {
			case <-c.stop:
				// One reading after stop: the last line arrived before
				// stop, perhaps after the reading before it.
				stopped = true
			case <-time.After(2 * time.Millisecond):
			}
			n, ok := read()
			if !ok {
				return
			}
			c.mu.Lock()
			c.at, c.ns = append(c.at, time.Now()), append(c.ns, n)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.end)
	return c
}

func (c *cpuTruth) end() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// cpu is the CPU seconds at t, between the readings around it (the
// first one for a t up to 5 ms before it: a line's arrival, sampling
// begun as it was read); ok false outside them.
func (c *cpuTruth) cpu(t time.Time) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.at), func(i int) bool { return !c.at[i].Before(t) })
	if i == 0 && len(c.at) > 0 && c.at[0].Sub(t) < 5*time.Millisecond {
		return float64(c.ns[0]) / 1e9, true
	}
	if i == 0 || i == len(c.at) {
		return 0, false
	}
	span := c.at[i].Sub(c.at[i-1]).Seconds()
	frac := t.Sub(c.at[i-1]).Seconds() / span
	return (float64(c.ns[i-1]) + frac*float64(c.ns[i]-c.ns[i-1])) / 1e9, true
}

// topLine is one JSON line of pyobs top and when it arrived.
type topLine struct {
	sn top.Snapshot
	at time.Time
}

// runTopLines runs pyobs top with args, timing each JSON line's arrival;
// onFirst is called with the first snapshot as it arrives.
func runTopLines(t *testing.T, onFirst func(top.Snapshot), args ...string) (lines []topLine, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	var se strings.Builder
	cmd.Stderr = &se
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := topLine{at: time.Now()}
		if err := json.Unmarshal(sc.Bytes(), &l.sn); err != nil {
			t.Fatalf("not JSON: %v: %s", err, sc.Text())
		}
		if len(lines) == 0 && onFirst != nil {
			onFirst(l.sn)
		}
		lines = append(lines, l)
	}
	_ = cmd.Wait()
	return lines, se.String(), cmd.ProcessState.ExitCode()
}

// TestTopTargetCPU: each interval's target_cpu is the target's CPU over
// that interval, against /proc ground truth read beside it (a one-thread
// spinner, with a CPU hog taking its share): the first interval counted
// from the sampler's start, not from before its load (it said 1.27-1.34
// for 1.00), and the last too. A program started with -- that exits: its
// last interval is its CPU to its exit, from its own account (it said 0
// with samples in it).
func TestTopTargetCPU(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	in := testutil.Find(t, "pyenv-3.12")
	// The window of interval i: from line i-1's arrival (the first: from
	// the recording's start, its elapsed_s before its arrival) to line i's.
	// pyobs reads /proc/PID/stat in 10 ms ticks at both ends, and its
	// lines arrive some ms after it read (tens under load, each end on its
	// own): allow 80 ms of CPU plus 3 %.
	check := func(t *testing.T, name string, sn top.Snapshot, from, to time.Time, truth float64) {
		t.Helper()
		iv := to.Sub(from).Seconds()
		want := truth / iv
		tol := 0.08/iv + 0.03*want
		t.Logf("%s: %d samples, target_cpu %.3f, /proc %.3f ± %.3f", name, sn.Samples, sn.TargetCPU, want, tol)
		if sn.Samples > 0 && sn.TargetCPU == 0 || math.Abs(sn.TargetCPU-want) > tol {
			t.Errorf("%s (elapsed %.3f s, %d samples): target_cpu %.3f, /proc says %.3f (%.3f s of CPU in %.3f s; tolerance %.3f)",
				name, sn.ElapsedS, sn.Samples, sn.TargetCPU, want, truth, iv, tol)
		}
	}

	t.Run("attached", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "spin.py")
		if err := os.WriteFile(script, []byte("print('READY', flush=True)\nx = 0\nwhile True:\n    x += 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script), 30*time.Second)
		truth := sampleCPU(t, tg.Pid)
		lines, stderr, code := runTopLines(t, nil, "top", "-p", strconv.Itoa(tg.Pid), "-d", "3s", "--format", "json")
		truth.end()
		if code != 0 || len(lines) < 3 || !lines[len(lines)-1].sn.Final {
			t.Fatalf("exit %d, %d lines (want some and a final one): %s", code, len(lines), stderr)
		}
		from := lines[0].at.Add(-time.Duration(lines[0].sn.ElapsedS * float64(time.Second)))
		for i, l := range lines {
			c0, ok0 := truth.cpu(from)
			c1, ok1 := truth.cpu(l.at)
			if !ok0 || !ok1 {
				t.Fatalf("line %d: no /proc reading around its interval", i+1)
			}
			check(t, fmt.Sprintf("interval %d of %d", i+1, len(lines)), l.sn, from, l.at, c1-c0)
			from = l.at
		}
	})

	t.Run("spawned exits", func(t *testing.T) {
		// Spins 4.3 s of its wall time, then says its CPU seconds and
		// exits at once (no interpreter finalization after its count).
		code := "import os, time\nt = time.monotonic()\nwhile time.monotonic() - t < 4.3: pass\nprint('CPU', time.process_time(), flush=True)\nos._exit(0)\n"
		var truth *cpuTruth
		lines, stderr, rc := runTopLines(t, func(sn top.Snapshot) { truth = sampleCPU(t, sn.Pid) },
			append(append([]string{"top", "--format", "json", "--"}, in.Argv...), "-c", code)...)
		if truth == nil {
			t.Fatalf("no JSON lines (exit %d): %s", rc, stderr)
		}
		truth.end()
		m := regexp.MustCompile(`(?m)^CPU ([0-9.]+)$`).FindStringSubmatch(stderr)
		if rc != 0 || m == nil || len(lines) < 3 || !lines[len(lines)-1].sn.Final {
			t.Fatalf("exit %d, %d lines (want two or more and a final one), program's stderr: %s", rc, len(lines), stderr)
		}
		exitCPU, _ := strconv.ParseFloat(m[1], 64)
		prev, last := lines[len(lines)-2], lines[len(lines)-1]
		c0, ok := truth.cpu(prev.at)
		if !ok {
			t.Fatalf("no /proc reading at the last regular line")
		}
		if last.sn.Samples == 0 {
			t.Fatalf("the last interval has no samples: %+v", last.sn)
		}
		check(t, "last interval", last.sn, prev.at, last.at, exitCPU-c0)
	})
}
