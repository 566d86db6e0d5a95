package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// One thread that waits on a FIFO, burns CPU for 1.5 s of wall time once
// the FIFO is opened, prints its own CPU seconds and wall seconds since
// then, and exits mid-window.
const exitMidWindowScript = `import os, sys, time
print("READY", flush=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
c0, w0 = time.process_time(), time.monotonic()
x = 0
while time.monotonic() - w0 < 1.5:
    x += 1
cpu, wall = time.process_time() - c0, time.monotonic() - w0
print("CPU", cpu, wall, flush=True)
os._exit(0)
`

// TestStatCountersExitMidWindow: a one-thread target that exits in the
// middle of stat's window. /proc's numbers end at the last poll before the
// exit; the perf counters count to the exit: task-clock must be the
// target's own CPU time (within a few %), and its utilization, over the
// counters' own window, at most one CPU — never task-clock divided by a
// shorter /proc window. --poll 1s leaves most of a second between the
// last read and the exit.
func TestStatCountersExitMidWindow(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.CPUHog(t, 1)
	dir := t.TempDir()
	script := filepath.Join(dir, "burn.py")
	fifo := filepath.Join(dir, "go")
	if err := os.WriteFile(script, []byte(exitMidWindowScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script, fifo), 30*time.Second)
	out := filepath.Join(dir, "stat.json")
	cmd := exec.Command(testutil.Binary(t), "stat", "-d", "4s", "--poll", "1s", "--format", "json", "-o", out, "-p", strconv.Itoa(tg.Pid))
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // stat's window has begun
	taken0 := machineTakenS(t)
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var cpu, wall float64
	select {
	case l := <-tg.Lines:
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "CPU" {
			t.Fatalf("target said %q", l)
		}
		cpu, _ = strconv.ParseFloat(f[1], 64)
		wall, _ = strconv.ParseFloat(f[2], 64)
	case <-time.After(30 * time.Second):
		t.Fatal("the target did not print its CPU time")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stat: %v\n%s", err, se.String())
	}
	taken := machineTakenS(t) - taken0
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		WindowS         float64  `json:"window_s"`
		Complete        bool     `json:"complete"`
		CountersWindowS *float64 `json:"counters_window_s"`
		Counters        []struct {
			Event string   `json:"event"`
			Value *float64 `json:"value"`
		} `json:"counters"`
		Ratios struct {
			CPUs *float64 `json:"task_clock_cpus"`
		} `json:"ratios"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Complete {
		t.Fatalf("the window is complete: the target did not exit mid-window\n%s", b)
	}
	var tc float64
	for _, c := range st.Counters {
		if c.Event == "task-clock" && c.Value != nil {
			tc = *c.Value / 1e9
		}
	}
	if tc == 0 || st.Ratios.CPUs == nil {
		t.Skipf("no task-clock counter here\n%s", b)
	}
	t.Logf("target: cpu %.3f s over %.3f s; stat: window %.3f s, task-clock %.3f s, %.3f CPUs; the machine's steal and interrupt time %.3f s", cpu, wall, st.WindowS, tc, *st.Ratios.CPUs, taken)
	// The target's own CPU from the go to its exit; the counters also see
	// its wake-up and exit: a few ms. task-clock is the time it was on a
	// CPU, which holds what the hypervisor stole and interrupts took while
	// it was there (its own CPU time leaves them out): at most all the
	// machine's over the run (task-clock ran 0.106 s over the target's
	// 1.103 s in one loaded CI run, which did not log that time).
	if tc < cpu*0.97-0.005 || tc > cpu*1.03+0.02+taken {
		t.Errorf("task-clock %.3f s, the target's own CPU time %.3f s (steal and interrupts %.3f s)", tc, cpu, taken)
	}
	// One thread: at most one CPU, and no more than its CPU over the time
	// it burned (the counters' window holds that time and more).
	if limit := min(1.0, cpu/wall) * 1.05; *st.Ratios.CPUs > limit+0.003 {
		t.Errorf("task-clock says %.3f CPUs utilized; one thread used %.3f CPUs over its %.2f s", *st.Ratios.CPUs, cpu/wall, wall)
	}
}

// machineTakenS is the CPU time of the whole machine so far that no task
// was given (/proc/stat: irq, softirq, steal), in seconds.
func machineTakenS(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: %q", line)
	}
	var ticks float64
	for _, s := range f[6:9] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q", line)
		}
		ticks += v
	}
	return ticks / 100 // USER_HZ
}
