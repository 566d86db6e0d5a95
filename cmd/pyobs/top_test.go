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
