package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/testutil"
)

// The error-message table (issue 8, point 4), beyond TestDumpBadInput:
// every bad input to dump, record and stat gives one line on stderr, a
// non-zero exit, no stack trace, nothing on stdout, and no output file
// (or temporary) left behind.

// badInput runs pyobs with args plus -o DIR/out.EXT and checks the error
// contract and that DIR stays empty.
func badInput(t *testing.T, code int, args []string, want ...string) testutil.Result {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.folded")
	r := testutil.Run(t, 60*time.Second, append(append([]string{}, args...), "-o", out)...)
	oneLineError(t, r, code, want...)
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files left behind after the error: %v", names)
	}
	return r
}

func sleeperPy(t *testing.T) *testutil.Target {
	t.Helper()
	py := testutil.Find(t, "pyenv-3.12")
	return testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c", "import time\nprint('READY', flush=True)\ntime.sleep(120)"), 20*time.Second)
}

// TestBadFlagsEveryCommand: each bad flag, for dump, record and stat.
func TestBadFlagsEveryCommand(t *testing.T) {
	testutil.RequireRoot(t)
	pid := strconv.Itoa(sleeperPy(t).Pid)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"dump/F0", []string{"dump", "-F", "0"}, []string{"unknown shorthand flag", "-F"}},
		{"dump/mode", []string{"dump", "--mode", "nope"}, []string{"unknown flag", "--mode"}},
		{"dump/negative-duration", []string{"dump", "-d", "-1s"}, []string{"unknown shorthand flag", "-d"}},
		{"dump/format", []string{"dump", "--format", "xml"}, []string{"--format", "xml", "text, json"}},
		{"dump/negative-after", []string{"dump", "--after", "-1s"}, []string{"--after"}},
		{"dump/after-with-p", []string{"dump", "--after", "1s"}, []string{"--after and --kill apply to -- CMD"}},
		{"dump/kill-with-p", []string{"dump", "--kill"}, []string{"--after and --kill apply to -- CMD"}},
		{"record/set-wall", []string{"record", "--mode", "wall", "--children", "-d", "1s"}, []string{"several processes", "bpf engine"}},
		{"record/set-perf", []string{"record", "--engine", "perf", "--children", "-d", "1s"}, []string{"several processes", "bpf engine"}},
		{"record/F0", []string{"record", "-F", "0"}, []string{"-F 0", "1..100000"}},
		{"record/F-too-high", []string{"record", "-F", "100001"}, []string{"-F 100001", "1..100000"}},
		{"record/F-not-a-number", []string{"record", "-F", "abc"}, []string{"abc", "--freq"}},
		{"record/mode", []string{"record", "--mode", "nope"}, []string{"--mode", "nope", "cpu, wall, gil"}},
		{"record/negative-duration", []string{"record", "-d", "-1s"}, []string{"duration", "negative"}},
		{"record/bad-duration", []string{"record", "-d", "soon"}, []string{"soon", "--duration"}},
		{"record/format", []string{"record", "--format", "xml"}, []string{"--format", "xml", "folded"}},
		{"stat/F0", []string{"stat", "-F", "0"}, []string{"unknown shorthand flag", "-F"}},
		{"stat/mode", []string{"stat", "--mode", "nope"}, []string{"unknown flag", "--mode"}},
		{"stat/negative-duration", []string{"stat", "-d", "-1s"}, []string{"-d", "positive"}},
		{"stat/zero-duration", []string{"stat", "-d", "0s"}, []string{"-d", "positive"}},
		{"stat/format", []string{"stat", "--format", "xml"}, []string{"--format", "xml", "text, json"}},
		{"stat/negative-interval", []string{"stat", "-i", "-1s"}, []string{"-i"}},
		{"stat/tiny-interval", []string{"stat", "-i", "1ms"}, []string{"-i", "10ms"}},
		{"stat/poll", []string{"stat", "--poll", "0s"}, []string{"--poll"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			badInput(t, exitUsage, append(append([]string{}, c.args...), "-p", pid), c.want...)
		})
	}
	// stat -- CMD reports the whole run: a window asked for is refused,
	// not silently ignored (and the command is not run).
	for _, w := range [][]string{{"-d", "1s"}, {"-i", "1s"}} {
		t.Run("stat/cmd"+w[0], func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			badInput(t, exitUsage, append(append([]string{"stat"}, w...), "--", "sh", "-c", "touch "+marker), "-d and -i do not apply to -- CMD")
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
}

// TestNoTargetEveryCommand: TestDumpBadInput's targets, for record and stat.
func TestNoTargetEveryCommand(t *testing.T) {
	testutil.RequireRoot(t)
	b, _ := os.ReadFile("/proc/sys/kernel/pid_max")
	var pidMax int
	fmt.Sscan(string(b), &pidMax)
	for _, cmd := range [][]string{{"record", "-d", "300ms"}, {"stat", "-d", "300ms"}} {
		name := cmd[0]
		t.Run(name+"/no-such-pid", func(t *testing.T) {
			badInput(t, exitNoTarget, append(cmd, "-p", strconv.Itoa(pidMax+1)), "no such process")
		})
		t.Run(name+"/kernel-thread", func(t *testing.T) {
			badInput(t, exitNoTarget, append(cmd, "-p", "2"), "kernel thread")
		})
		t.Run(name+"/zombie", func(t *testing.T) {
			py := testutil.Find(t, "pyenv-3.12")
			tg := testutil.StartArgv(t, append(append([]string{}, py.Argv...), "-c",
				"import os,time\npid=os.fork()\nif pid==0: os._exit(0)\ntime.sleep(0.3)\nprint('READY', flush=True)\ntime.sleep(60)"), 20*time.Second)
			zpid := findChild(t, tg.Pid)
			badInput(t, exitNoTarget, append(cmd, "-p", strconv.Itoa(zpid)), "zombie", strconv.Itoa(zpid))
		})
	}
	// A set whose -p list names a pid with no process: refused as a lone
	// -p is, by every command that takes a set (seeded, it would have sat
	// in the kernel's set for the next process given that pid).
	t.Run("set/no-such-pid", func(t *testing.T) {
		live := strconv.Itoa(sleeperPy(t).Pid)
		gone := strconv.Itoa(pidMax + 1)
		for _, cmd := range [][]string{{"trace"}, {"red"}, {"stat"}, {"record"}, {"offcpu"}} {
			badInput(t, exitNoTarget, append(cmd, "-d", "300ms", "-p", live+","+gone), "pid "+gone, "no such process")
		}
	})
	// A --cgroup that names no cgroup v2 directory is bad input (2).
	t.Run("set/not-a-cgroup", func(t *testing.T) {
		for _, dir := range []string{"/nonexistent-pyobs-cgroup", t.TempDir()} {
			badInput(t, exitUsage, []string{"stat", "-d", "300ms", "--cgroup", dir}, "cgroup "+dir, "not a cgroup v2 directory")
		}
	})
	// A shell that runs python as a child (not by exec): record, offcpu
	// and dump wait for the command itself, and say what it must do.
	t.Run("cmd/shell-child-python", func(t *testing.T) {
		py := testutil.Find(t, "pyenv-3.12")
		for _, cmd := range [][]string{{"record"}, {"offcpu"}, {"dump"}} {
			badInput(t, exitNotPython, append(cmd, "--", "sh", "-c", py.Argv[0]+" -c pass; true"), "never ran a Python interpreter", "must exec python")
		}
	})
	t.Run("record/not-python", func(t *testing.T) {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { c.Process.Kill(); c.Wait() }()
		time.Sleep(100 * time.Millisecond)
		badInput(t, exitNotPython, []string{"record", "-d", "300ms", "-p", strconv.Itoa(c.Process.Pid)}, "not a Python process", "(sleep)")
	})
	t.Run("record/permission", func(t *testing.T) {
		tg := sleeperPy(t)
		dir := t.TempDir()
		// The output's directory writable by the user, so the refusal is
		// the attach's (an output it can't write is refused first, exit 2).
		_ = os.Chmod(filepath.Dir(dir), 0o711)
		_ = os.Chmod(dir, 0o777)
		c := exec.Command(testutil.Binary(t), "record", "-d", "300ms", "-p", strconv.Itoa(tg.Pid), "-o", filepath.Join(dir, "p.folded"))
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		oneLineError(t, testutil.RunCmd(t, 30*time.Second, c), exitPermission, "permission denied", "CAP_SYS_PTRACE")
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("files left behind: %v", ents)
		}
	})
}

// TestUnwritableOutput: an output that can't be written is one line and
// exit 2 (refused before the target is attached) for every command, and
// leaves no temporary behind.
func TestUnwritableOutput(t *testing.T) {
	testutil.RequireRoot(t)
	pid := strconv.Itoa(sleeperPy(t).Pid)
	for _, cmd := range [][]string{{"dump"}, {"record", "-d", "300ms", "--format", "folded"}, {"stat", "-d", "200ms"}} {
		t.Run(cmd[0]+"/missing-directory", func(t *testing.T) {
			r := testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", "/proc/nonexistent/x")...)
			oneLineError(t, r, exitUsage, "/proc/nonexistent")
		})
		t.Run(cmd[0]+"/not-a-directory", func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			r := testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", file+"/x")...)
			oneLineError(t, r, exitUsage, file)
			if b, _ := os.ReadFile(file); string(b) != "keep" {
				t.Errorf("the file in the way was changed: %q", b)
			}
		})
		t.Run(cmd[0]+"/output-is-a-directory", func(t *testing.T) {
			parent := t.TempDir()
			target := filepath.Join(parent, "out")
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			r := testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", target)...)
			oneLineError(t, r, exitUsage, target)
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 || ents[0].Name() != "out" || !ents[0].IsDir() {
				t.Errorf("the directory holds %v, want only the directory out/", ents)
			}
		})
	}
}

// TestUnsupportedOldPythons: 2.7 and 3.6 (no _PyRuntime: it came in 3.7)
// and 3.7, 3.8 are rejected by dump and record with the version and the
// supported range named; stat (which needs no interpreter) still works.
func TestUnsupportedOldPythons(t *testing.T) {
	testutil.RequireRoot(t)
	for _, v := range []string{"2.7", "3.6", "3.7", "3.8"} {
		t.Run(v, func(t *testing.T) {
			bins, _ := filepath.Glob(filepath.Join(pyenvRoot(), "versions", v+".*", "bin", "python"+v))
			if len(bins) == 0 {
				testutil.Skip(t, "no pyenv "+v+" interpreter (pyenv install "+v+")")
			}
			tg := testutil.StartArgv(t, []string{bins[0], "-c", "import sys, time\nsys.stdout.write('READY\\n')\nsys.stdout.flush()\ntime.sleep(60)"}, 20*time.Second)
			pid := strconv.Itoa(tg.Pid)
			for _, cmd := range [][]string{{"dump"}, {"record", "-d", "300ms"}} {
				dir := t.TempDir()
				r := testutil.Run(t, 60*time.Second, append(cmd, "-p", pid, "-o", filepath.Join(dir, "out"))...)
				oneLineError(t, r, exitNotPython, "unsupported Python "+v, "3.10 to 3.15")
				if ents, _ := os.ReadDir(dir); len(ents) > 0 {
					t.Errorf("%s: files left behind: %v", cmd[0], ents)
				}
			}
			// Spawned: named as soon as its interpreter is mapped.
			r := testutil.Run(t, 60*time.Second, "dump", "--", bins[0], "-c", "import time\ntime.sleep(5)")
			oneLineError(t, r, exitNotPython, "unsupported Python "+v, "3.10 to 3.15")
			r = testutil.Run(t, 60*time.Second, "stat", "-d", "200ms", "-p", pid)
			if r.Code != 0 || !strings.Contains(r.Stdout, "cpu") {
				t.Errorf("stat of Python %s: exit %d, stderr %q", v, r.Code, r.Stderr)
			}
		})
	}
}

// pyenvRoot is where pyenv keeps its interpreters: `pyenv root`, else
// $PYENV_ROOT, else ~/.pyenv.
func pyenvRoot() string {
	if out, err := exec.Command("pyenv", "root").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		return strings.TrimSpace(string(out))
	}
	if r := os.Getenv("PYENV_ROOT"); r != "" {
		return r
	}
	return filepath.Join(os.Getenv("HOME"), ".pyenv")
}

// TestOtherPidNamespace: a target in its own pid namespace (pid 1 there,
// as in a container), observed by its pid here. Its interpreter knows its
// threads by that namespace's numbers; pyobs must report ours (those of
// /proc/PID/task and perf), or fail in one line.
func TestOtherPidNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testutil.Skip(t, "no unshare(1) (util-linux) to start a process in a new pid namespace")
	}
	for _, label := range []string{"pyenv-3.10", "pyenv-3.12"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			script := "import os, threading\n" +
				"def spin():\n    while True: pass\n" +
				"threading.Thread(target=spin, name='spinner', daemon=True).start()\n" +
				"print('READY', os.getpid(), flush=True)\n" +
				"threading.Event().wait()\n"
			argv := append([]string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child"}, py.Argv...)
			tg := testutil.StartArgv(t, append(argv, "-c", script), 20*time.Second)
			inner := findChild(t, tg.Pid)
			t.Cleanup(func() { _ = syscall.Kill(inner, syscall.SIGKILL) })
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", inner))
			ours := map[int]bool{}
			for _, p := range tasks {
				n, _ := strconv.Atoi(filepath.Base(p))
				ours[n] = true
			}
			pid := strconv.Itoa(inner)

			r := testutil.Run(t, 30*time.Second, "dump", "--format", "json", "-p", pid)
			if r.Code != 0 {
				oneLineError(t, r, r.Code)
			} else {
				var d dump.Dump
				if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
					t.Fatalf("dump output is not JSON: %v", err)
				}
				for _, th := range d.Threads {
					if !ours[th.Tid] {
						t.Errorf("dump: thread %q has tid %d, not one of the target's tasks %v here", th.Name, th.Tid, keys(ours))
					}
				}
			}
			for _, mode := range []string{"cpu", "wall"} {
				r := testutil.Run(t, 30*time.Second, "record", "--mode", mode, "--threads", "-F", "199", "-d", "700ms", "--format", "folded", "-p", pid)
				if r.Code != 0 {
					oneLineError(t, r, r.Code)
					continue
				}
				if strings.Contains(r.Stdout, "[no Python thread state]") || strings.Contains(r.Stdout, "[?]") {
					t.Errorf("record --mode %s: samples not matched to their Python threads:\n%.600s", mode, r.Stdout)
				}
				for tid := range ours {
					if tid != inner && !strings.Contains(r.Stdout, fmt.Sprintf("spinner (%d)", tid)) {
						t.Errorf("record --mode %s: the spinning thread (tid %d here) is missing:\n%.600s", mode, tid, r.Stdout)
					}
				}
			}
			r = testutil.Run(t, 30*time.Second, "stat", "-d", "300ms", "--format", "json", "-p", pid)
			if r.Code != 0 {
				oneLineError(t, r, r.Code)
			} else if !strings.Contains(r.Stdout, `"spinner"`) {
				t.Errorf("stat: the Python thread name is missing:\n%.600s", r.Stdout)
			}
		})
	}
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
