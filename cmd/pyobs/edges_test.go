package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// The rough edges of issue #16, each as the user met it.

// TestEdgePtraceRefusedNoGuess (edge 1): a target whose ptrace is refused
// by something else is not blamed on a seccomp profile pyobs does not run
// under nor on a capability it holds. Another tracer (strace) is named as
// the gate; pid 1, when something pyobs cannot check refuses it (a
// sandbox), gets a line that says what was checked.
func TestEdgePtraceRefusedNoGuess(t *testing.T) {
	testutil.RequireRoot(t)
	self := testutil.ProcStatus(os.Getpid())
	noGuess := func(r testutil.Result) {
		t.Helper()
		if self["Seccomp"] == "0" && strings.Contains(r.Stderr, "seccomp profile") {
			t.Errorf("blames a seccomp profile although pyobs runs with Seccomp 0: %q", r.Stderr)
		}
		if strings.Contains(r.Stderr, "missing CAP_SYS_PTRACE") {
			t.Errorf("blames a missing CAP_SYS_PTRACE that root holds: %q", r.Stderr)
		}
	}
	t.Run("traced", func(t *testing.T) {
		strace, err := exec.LookPath("strace")
		if err != nil {
			testutil.Skip(t, "no strace(1) to trace the target first")
		}
		tg := sleeperPy(t)
		pid := strconv.Itoa(tg.Pid)
		st := exec.Command(strace, "-qq", "-o", os.DevNull, "-p", pid)
		if err := st.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = st.Process.Kill(); _ = st.Wait() }()
		for i := 0; i < 200 && testutil.ProcStatus(tg.Pid)["TracerPid"] == "0"; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		for _, args := range [][]string{{"dump", "--lock"}, {"trace", "--engine", "ptrace", "-d", "300ms"}} {
			r := testutil.Run(t, 30*time.Second, append(args, "-p", pid)...)
			oneLineError(t, r, exitPermission, "another tracer: pid "+strconv.Itoa(st.Process.Pid)+" (strace) already traces it")
			noGuess(r)
		}
	})
	t.Run("pid1", func(t *testing.T) {
		r := testutil.Run(t, 30*time.Second, "dump", "-p", "1")
		if r.Code != exitPermission {
			t.Skipf("pid 1 is readable here (exit %d): nothing refuses its ptrace", r.Code)
		}
		oneLineError(t, r, exitPermission, "pid 1")
		noGuess(r)
		if !strings.Contains(r.Stderr, "checked") && !strings.Contains(r.Stderr, "seccomp filter on pyobs") {
			t.Errorf("neither names a checked gate nor says what was checked: %q", r.Stderr)
		}
	})
}

// TestEdgeBadPid (edge 2): -p abc and -p 0 are one clear line each, exit 2.
func TestEdgeBadPid(t *testing.T) {
	for _, c := range []struct{ pid, want string }{
		{"abc", `invalid pid "abc": -p takes a process id`},
		{"0", "invalid pid 0: -p takes a process id (1 or more)"},
		{"12x", `invalid pid "12x"`},
	} {
		for _, cmd := range []string{"dump", "record", "stat", "trace"} {
			r := testutil.Run(t, 30*time.Second, cmd, "-p", c.pid)
			oneLineError(t, r, exitUsage, c.want)
			if strings.Contains(r.Stderr, "strconv") || strings.Contains(r.Stderr, "no target") {
				t.Errorf("%s -p %s: %q", cmd, c.pid, r.Stderr)
			}
		}
	}
}

// TestEdgeUnknownExtension (edge 3): -o with an extension no format claims
// is refused (exit 2, no file) unless --format says; no extension is svg.
func TestEdgeUnknownExtension(t *testing.T) {
	testutil.RequireRoot(t)
	pid := strconv.Itoa(sleeperPy(t).Pid)
	dir := t.TempDir()
	for _, cmd := range [][]string{{"record", "-d", "300ms"}, {"offcpu", "-d", "300ms"}} {
		out := filepath.Join(dir, "x.unknownext")
		r := testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", out)...)
		oneLineError(t, r, exitUsage, ".unknownext", "--format")
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s wrote %s", cmd[0], out)
		}
		r = testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", out, "--format", "folded")...)
		if b, err := os.ReadFile(out); r.Code != 0 || err != nil || strings.Contains(string(b), "<svg") {
			t.Errorf("%s --format folded -o %s: exit %d (%s), file %.40q", cmd[0], out, r.Code, r.Stderr, b)
		}
		os.Remove(out)
	}
}

// TestEdgeRecordHelp (edge 4): record's help says what -d 0s means.
func TestEdgeRecordHelp(t *testing.T) {
	r := testutil.Run(t, 30*time.Second, "record", "--help")
	for _, w := range []string{"-d 0s (the default) records until Ctrl-C or the target's exit", "0, the default: until Ctrl-C"} {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("record --help lacks %q", w)
		}
	}
}

// TestEdgeRecordRate (edge 5): a rate that cannot be honoured is said at
// the start (the first stderr line, before the footer); one that can be
// says nothing. The cpu-mode cap at the kernel's limit: internal/record
// TestHonoured (the sysctl is the machine's, not the test's to lower).
func TestEdgeRecordRate(t *testing.T) {
	testutil.RequireRoot(t)
	pid := strconv.Itoa(sleeperPy(t).Pid)
	r := testutil.Run(t, 60*time.Second, "record", "--mode", "wall", "-F", "20000", "-d", "300ms", "--format", "folded", "-p", pid)
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	if r.Code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "-F 20000 in wall mode") || !strings.HasPrefix(lines[1], "pyobs record: wall mode") {
		t.Errorf("wall -F 20000: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = testutil.Run(t, 60*time.Second, "record", "-F", "99", "-d", "300ms", "--format", "folded", "-p", pid)
	if n := strings.Count(strings.TrimSpace(r.Stderr), "\n"); r.Code != 0 || n != 0 {
		t.Errorf("cpu -F 99: exit %d, stderr %q (want the footer only)", r.Code, r.Stderr)
	}
}

// TestEdgeDumpProgramEndedFirst (edge 6): dump --after longer than the
// program runs says the program ended before the dump, and exits with the
// program's status (not 3 with a memory-read error).
func TestEdgeDumpProgramEndedFirst(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	for i := 0; i < 3; i++ {
		args := append([]string{"dump", "--after", "3s", "--"}, py.Argv...)
		r := testutil.Run(t, 60*time.Second, append(args, "-c", "import sys\nprint('hello', flush=True)\nsys.exit(7)")...)
		if r.Code != 7 {
			t.Errorf("exit %d, want the program's 7 (stderr %q)", r.Code, r.Stderr)
		}
		// pyobs's output is stdout (nothing, here): the program's went to stderr.
		if r.Stdout != "" {
			t.Errorf("stdout %q, want nothing (the program's stdout goes to stderr)", r.Stdout)
		}
		l := strings.TrimSpace(strings.Replace(r.Stderr, "hello\n", "", 1))
		if !strings.Contains(r.Stderr, "hello\n") || strings.Contains(l, "\n") || !strings.Contains(l, "ended by itself, with status 7") ||
			strings.Contains(l, "bytes") {
			t.Errorf("stderr %q: want the program's line and one line saying the program ended first with status 7", r.Stderr)
		}
	}
}

// TestEdgeRedEndsProgram (edge 7): red -d over a spawned program that
// outlives the window ends it and says so on stderr.
func TestEdgeRedEndsProgram(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	args := append([]string{"red", "-d", "1s", "--format", "json", "--"}, py.Argv...)
	r := testutil.Run(t, 60*time.Second, append(args, "-c", "import time\ntime.sleep(60)")...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "the -d 1s window ended while the program") || !strings.Contains(r.Stderr, "pyobs ended it") {
		t.Errorf("stderr does not say the program was ended: %q", r.Stderr)
	}
}

// TestEdgeOffcpuSpawnedNames (edge 8): offcpu -- CMD, where the program
// ends before the report, keeps what -p shows: the threads' Python names
// and named native frames (not bare addresses), learned while it lived.
func TestEdgeOffcpuSpawnedNames(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	script := "import os, threading, time\n" +
		"def nap():\n    for _ in range(30):\n        time.sleep(0.05)\n" +
		"def reader(r):\n    os.read(r, 1)\n" +
		"r, w = os.pipe()\n" +
		"t1 = threading.Thread(target=nap, name='napper'); t1.start()\n" +
		"t2 = threading.Thread(target=reader, args=(r,), name='reader'); t2.start()\n" +
		"time.sleep(2)\nos.write(w, b'x')\nt1.join(); t2.join()\n"
	for _, engine := range []string{"bpf", "perf"} {
		t.Run(engine, func(t *testing.T) {
			args := append([]string{"offcpu", "--engine", engine, "--"}, py.Argv...)
			r := testutil.Run(t, 60*time.Second, append(args, "-c", script)...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			table := r.Stdout[strings.Index(r.Stdout, "THREAD"):]
			table = table[:strings.Index(table, "\n\n")]
			for _, w := range []string{"napper (", "reader (", "MainThread ("} {
				if n := strings.Count(table, "\n"+w); n != 1 {
					t.Errorf("thread %q has %d rows in the table, want 1:\n%s", w, n, table)
				}
			}
			if engine == "bpf" && strings.Contains(r.Stdout, "[unknown] (0x") {
				t.Errorf("a native frame is a bare address (its mapping was not kept):\n%s", r.Stdout)
			}
		})
	}
}

// TestEdgeUnprivilegedRecord (edge 9): record as an unprivileged user
// (perf refused) names the gate and suggests --mode wall, which works.
func TestEdgeUnprivilegedRecord(t *testing.T) {
	testutil.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv (util-linux) is not installed: can't run pyobs as another user")
	}
	py := testutil.Find(t, "debian-3.11") // /usr/bin: readable by any user, unlike pyenv's under /root
	dir, err := os.MkdirTemp("", "pyobs-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "pyobs")
	b, err := os.ReadFile(testutil.Binary(t))
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	nobody := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin}
	run := func(args ...string) testutil.Result {
		argv := append(append(append([]string{}, nobody...), args...), "--format", "folded", "--")
		argv = append(append(argv, py.Argv...), "-c", "import time\nt = time.time()\nwhile time.time() - t < 1: pass")
		return testutil.RunCmd(t, 60*time.Second, exec.Command(setpriv, argv...))
	}
	r := run("record", "-d", "2s")
	if r.Code == 0 {
		t.Skip("perf events are open to unprivileged users here (kernel.perf_event_paranoid <= 1): nothing to refuse")
	}
	if r.Code != exitPermission || !strings.Contains(r.Stderr, "perf_event_paranoid") || !strings.Contains(r.Stderr, "--mode wall") {
		t.Errorf("unprivileged record: exit %d, stderr %q; want %d naming the gate and suggesting --mode wall", r.Code, r.Stderr, exitPermission)
	}
	r = run("record", "--mode", "wall", "-d", "2s")
	if r.Code != 0 || !strings.Contains(r.Stdout, "[running]") {
		t.Errorf("unprivileged record --mode wall: exit %d, stderr %q, stdout %.200q", r.Code, r.Stderr, r.Stdout)
	}
}

const lockContention = "import threading, time\nlock = threading.Lock()\n" +
	"def work():\n    t = time.time()\n    while time.time() - t < %s:\n        with lock:\n            time.sleep(0.0005)\n" +
	"ts = [threading.Thread(target=work) for _ in range(4)]\nprint('READY', flush=True)\nfor t in ts: t.start()\nfor t in ts: t.join()\n"

// traceTable is the text table's header count and the sum of its rows.
func traceTable(t *testing.T, out string) (header, rows uint64, legend bool) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) < 2 {
		t.Fatalf("no table: %q", out)
	}
	f := strings.Split(lines[0], ", ")
	head := strings.Fields(f[len(f)-1])
	for i, l := range f {
		if strings.HasSuffix(l, "calls") || strings.Contains(l, " calls (of ") {
			head = strings.Fields(strings.Join(f[i:], ", "))
			break
		}
	}
	header, _ = strconv.ParseUint(head[0], 10, 64)
	for _, l := range lines[2:] {
		fs := strings.Fields(l)
		if len(fs) >= 8 && strings.Contains("0123456789", fs[0][:1]) {
			n, _ := strconv.ParseUint(fs[1], 10, 64)
			rows += n
		}
		legend = legend || strings.HasPrefix(l, "%wall: time in the call over the")
	}
	return header, rows, legend
}

// TestEdgeTraceCounts (edges 10, 11): trace -e futex -- CMD of threads
// contending for a lock: the header's count is the table's (the rest, if
// any, said with why), and %wall (summed over threads: 368 % here) is
// labelled as such.
func TestEdgeTraceCounts(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	args := append([]string{"trace", "-e", "futex", "--"}, py.Argv...)
	r := testutil.Run(t, 60*time.Second, append(args, "-c", fmt.Sprintf(lockContention, "1.0"))...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	out := r.Stdout[strings.Index(r.Stdout, "pyobs trace:"):]
	header, rows, legend := traceTable(t, out)
	if header == 0 || header != rows {
		t.Errorf("header says %d calls, the rows %d:\n%s", header, rows, out)
	}
	if first, _, _ := strings.Cut(out, "\n"); strings.Contains(first, "(of ") && !strings.Contains(first, "not counted: ") {
		t.Errorf("a second count without its reason: %q", first)
	}
	if !legend {
		t.Errorf("no %%wall legend for 5 threads:\n%s", out)
	}
}

// TestEdgeTraceWallLegend (edge 10): trace -p of a multi-threaded target.
func TestEdgeTraceWallLegend(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c", fmt.Sprintf(lockContention, "60")), 20*time.Second)
	r := testutil.Run(t, 60*time.Second, "trace", "-d", "1s", "-p", strconv.Itoa(tg.Pid))
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	header, rows, legend := traceTable(t, r.Stdout)
	if !legend || header != rows {
		t.Errorf("legend %v, header %d, rows %d:\n%s", legend, header, rows, r.Stdout)
	}
}

// TestEdgeSVGLate (edge 12): the SVG's account carries the late count of
// the text footer (the same number), and the README names
// [blocked before read], a frame record writes. Late reads belong to the
// engine that reads stacks from user space after the sample (--engine
// perf); the bpf engine walks them at the sample and has none.
func TestEdgeSVGLate(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "busy.py")
	out := filepath.Join(t.TempDir(), "p.svg")
	r := testutil.Run(t, 60*time.Second, "record", "--engine", "perf", "-F", "2000", "-d", "1s", "-p", strconv.Itoa(tg.Pid), "-o", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	i := strings.Index(r.Stderr, ", late ")
	if i < 0 {
		t.Fatalf("footer without a late count: %q", r.Stderr)
	}
	n, err := strconv.Atoi(strings.Fields(r.Stderr[i+len(", late "):])[0])
	if err != nil {
		t.Fatalf("footer %q: %v", r.Stderr, err)
	}
	svg, _ := os.ReadFile(out)
	if want := "late " + groupThousands(n); !strings.Contains(string(svg), want) {
		t.Errorf("the SVG does not say %q (footer %q)", want, r.Stderr)
	}
	readme, _ := os.ReadFile(filepath.Join(testutil.Repo(), "README.md"))
	if !strings.Contains(string(readme), "`[blocked before read]`") {
		t.Errorf("README does not explain [blocked before read]")
	}
}

func groupThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
