package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// A -p PID target that execs a new program mid-run (exec_self.py, beside
// a CPU hog): the command ends at the exec with exit status 3 and one
// line saying what the target became; what ran before the exec is named
// (before_exec_*), nothing is named from the new program (after_exec_*).
// Truth: the target's own "EXEC CPU WRITES" line, printed just before it
// execs. Before, record, trace and offcpu went on reading the new program
// with the old one's addresses and exited 0 without a word of the exec.

// execRun is one observation of an exec'ing target: pyobs's exit status
// and stderr, the output file's text, and the target's truth.
type execRun struct {
	code           int
	stderr, output string
	cpu            float64 // the target's process_time at its exec
	writes         int     // its writes to /dev/null before the exec
}

// runExecing starts exec_self.py MODE SECONDS, runs pyobs args -p PID -o
// OUT, releases the target once pyobs has its perf events or BPF links
// open (and a moment more), and waits for pyobs to end.
func runExecing(t *testing.T, mode, seconds string, args ...string) execRun {
	t.Helper()
	in := testutil.Find(t, "pyenv-3.12")
	script := filepath.Join(testutil.Repo(), "testdata", "targets", "exec_self.py")
	argv := append(append([]string{}, in.Argv...), script, mode, seconds)
	tg := startWaiting(t, argv)
	stdin, lines := tg.stdin, tg.lines
	outFile := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(testutil.Binary(t), append(args, "-p", strconv.Itoa(tg.pid), "-o", outFile)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	for end := time.Now().Add(30 * time.Second); !observing(cmd.Process.Pid) && !traced(tg.pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			_ = cmd.Process.Kill()
			t.Fatalf("pyobs never attached: %s", stderr.String())
		}
	}
	time.Sleep(500 * time.Millisecond) // its maps filled, its loop running
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var r execRun
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "EXEC %g %d", &r.cpu, &r.writes); err != nil {
			t.Fatalf("target said %q", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("the target never exec'd")
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("pyobs did not end: %s", stderr.String())
	}
	b, _ := os.ReadFile(outFile)
	r.code, r.stderr, r.output = cmd.ProcessState.ExitCode(), stderr.String(), string(b)
	return r
}

// observing: pid holds a perf event or a BPF link.
func observing(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && (l == "anon_inode:[perf_event]" || l == "anon_inode:bpf_link") {
			return true
		}
	}
	return false
}

// traced: pid's main thread has a ptrace tracer (the ptrace engine's).
func traced(pid int) bool {
	st := testutil.ProcStatus(pid)
	return st != nil && st["TracerPid"] != "0" && st["TracerPid"] != ""
}

// checkExeced: status 3, the exec said in one line, nothing of the new
// program named, and the old one's work named (before, when not "").
func checkExeced(t *testing.T, r execRun, before string) {
	t.Helper()
	t.Logf("exit %d; target: cpu %.2fs, %d writes before its exec; stderr:\n%s", r.code, r.cpu, r.writes, r.stderr)
	if r.code != 3 {
		t.Errorf("exit status %d, want 3 (the target exec'd)", r.code)
	}
	if !strings.Contains(r.stderr, "pyobs: pid ") || !strings.Contains(r.stderr, "exec'd a new program (now ") {
		t.Errorf("the exec is not said on stderr")
	}
	var frames []string // the output but its line saying what the target became (its argv names after_exec_*)
	for _, l := range strings.Split(r.output, "\n") {
		if !strings.Contains(l, `"target_execed"`) && !strings.Contains(l, "exec'd (now ") {
			frames = append(frames, l)
		}
	}
	if strings.Contains(strings.Join(frames, "\n"), "after_exec") {
		t.Errorf("a frame of the new program was named:\n%s", r.output)
	}
	if before != "" && !strings.Contains(r.output, before) {
		t.Errorf("%s, run before the exec, is not named:\n%s", before, r.output)
	}
}

func TestRecordPidExecs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	const freq = 199
	r := runExecing(t, "burn", "1.5", "record", "-F", strconv.Itoa(freq), "-d", "8s", "--format", "folded")
	checkExeced(t, r, "before_exec_burn")
	// Samples before the exec named: the target's CPU over the window
	// (from its release: its start-up CPU, ~0.05 s, is below the slack).
	named := uint64(0)
	for _, l := range strings.Split(r.output, "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 && strings.Contains(l, "before_exec_burn") {
			n, _ := strconv.ParseUint(l[i+1:], 10, 64)
			named += n
		}
	}
	want := 0.6 * (r.cpu - 0.1) * freq
	t.Logf("%d samples named before_exec_burn; the target burned %.2fs (%.0f samples expected at -F %d)", named, r.cpu, r.cpu*freq, freq)
	if float64(named) < want {
		t.Errorf("%d samples named before the exec, want at least %.0f", named, want)
	}
}

func TestTracePidExecs(t *testing.T) {
	for _, engine := range []string{"tracepoint", "ptrace"} {
		t.Run(engine, func(t *testing.T) { tracePidExecs(t, engine) })
	}
}

// tracePidExecs: either engine ends at the exec (ptrace: before, it went
// on counting the new program's calls as the target's, exit status 0).
func tracePidExecs(t *testing.T, engine string) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	r := runExecing(t, "io", "1.0", "trace", "--engine", engine, "-d", "8s", "--slow", "0", "--format", "json")
	checkExeced(t, r, "before_exec_io")
	if !strings.Contains(r.output, `"target_execed"`) {
		t.Errorf("the JSON does not say the target exec'd")
	}
	// The writes counted: the target's own (and its EXEC line), none of
	// the new program's.
	i := strings.Index(r.output, `"name": "write"`)
	if i < 0 {
		t.Fatalf("no write counted:\n%s", r.output)
	}
	var calls int
	if _, err := fmt.Sscanf(r.output[i+strings.Index(r.output[i:], `"calls":`):], `"calls": %d`, &calls); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes counted; the target made %d before its exec (and printed one line)", calls, r.writes)
	if calls > r.writes+1 || calls < r.writes*9/10 {
		t.Errorf("%d writes counted, the target made %d (+1 line) before its exec", calls, r.writes)
	}
}

func TestOffcpuPidExecs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	r := runExecing(t, "io", "1.0", "offcpu", "--engine", "bpf", "-d", "8s", "--format", "folded")
	checkExeced(t, r, "before_exec_io")
	// Off CPU before the exec: at most the window up to the exec (its
	// sleeps of 2 ms, 1 s of them), not the 8 s asked for.
	var us uint64
	for _, l := range strings.Split(r.output, "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			n, _ := strconv.ParseUint(l[i+1:], 10, 64)
			us += n
		}
	}
	t.Logf("%.3fs off CPU in the profile", float64(us)/1e6)
	if us > 2_000_000 {
		t.Errorf("%.3fs off CPU: more than the target's second before its exec", float64(us)/1e6)
	}
}

func TestMemPidExecs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	// io: few allocations (each one a trap under the probes), so the
	// target execs on time.
	r := runExecing(t, "io", "1.0", "mem", "--engine", "probe", "-d", "8s", "--format", "text")
	checkExeced(t, r, "")
	if !strings.Contains(r.output, "the target exec'd (now ") {
		t.Errorf("the report does not say the target exec'd:\n%s", r.output)
	}
	// The window ends at the exec (seen within 20 ms), not at -d 8s.
	var window float64
	if i := strings.Index(r.output, "a window of "); i >= 0 {
		fmt.Sscanf(r.output[i:], "a window of %g s", &window)
	}
	t.Logf("window %.2fs", window)
	if window <= 0 || window > 4 {
		t.Errorf("window %.2fs: the target exec'd about 1.5 s after the probes were on, not after -d 8s", window)
	}
}
