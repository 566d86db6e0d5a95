package ptrace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// freezeTarget starts a process with a few threads (python: sleeping,
// spinning and blocked in read()) and returns its pid and tids.
func freezeTarget(t *testing.T) (int, []int) {
	t.Helper()
	in := testutil.Find(t, "pyenv-3.12")
	script := "import os, threading, time\n" +
		"r, w = os.pipe()\n" +
		"threading.Thread(target=lambda: os.read(r, 1), daemon=True).start()\n" +
		"threading.Thread(target=lambda: time.sleep(600), daemon=True).start()\n" +
		"def spin():\n    while True: pass\n" +
		"threading.Thread(target=spin, daemon=True).start()\n" +
		"time.sleep(0.1)\nprint('READY', flush=True)\ntime.sleep(600)\n"
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c", script), 30*time.Second)
	return tg.Pid, freezeTids(t, tg.Pid)
}

func freezeTids(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		tids = append(tids, n)
	}
	return tids
}

func taskStatus(pid, tid int) (state, tracer string) {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "status"))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "State:"); ok {
			state = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			tracer = strings.TrimSpace(v)
		}
	}
	return
}

// checkThawed: every thread untraced and not stopped (a wake-up may take a moment).
func checkThawed(t *testing.T, pid int, tids []int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for _, tid := range tids {
		for {
			st, tr := taskStatus(pid, tid)
			ok := tr == "0" && !strings.HasPrefix(st, "t") && !strings.HasPrefix(st, "T")
			if st == "" || ok {
				break // gone, or fine
			}
			if time.Now().After(deadline) {
				t.Errorf("tid %d after Thaw: State %s, TracerPid %s", tid, st, tr)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestFreezeThaw: Freeze stops every thread (state t, traced by us),
// including ones blocked in read() and sleep(); Thaw resumes them all, and
// a second Thaw is harmless.
func TestFreezeThaw(t *testing.T) {
	testutil.RequireRoot(t)
	pid, tids := freezeTarget(t)
	f, err := Freeze(pid, tids)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tids) != len(tids) {
		t.Errorf("stopped %d of %d threads", len(f.Tids), len(tids))
	}
	for _, tid := range f.Tids {
		st, tr := taskStatus(pid, tid)
		// The tracer is the thread that seized it: one of ours.
		if _, err := os.Stat("/proc/self/task/" + tr); !strings.HasPrefix(st, "t") || tr == "0" || err != nil {
			t.Errorf("tid %d frozen: State %s, TracerPid %s (want t, a thread of pid %d)", tid, st, tr, os.Getpid())
		}
	}
	f.Thaw()
	f.Thaw()
	if f.Held <= 0 {
		t.Errorf("Held = %v after Thaw", f.Held)
	}
	checkThawed(t, pid, tids)
}

// TestFreezeVanishedThread: a tid that no longer exists is skipped, not an error.
func TestFreezeVanishedThread(t *testing.T) {
	testutil.RequireRoot(t)
	pid, tids := freezeTarget(t)
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	gone := c.Process.Pid // reaped: no such task
	f, err := Freeze(pid, append(append([]int{}, tids...), gone))
	if err != nil {
		t.Fatalf("Freeze with a vanished tid: %v", err)
	}
	defer f.Thaw()
	for _, tid := range f.Tids {
		if tid == gone {
			t.Errorf("the vanished tid %d is listed as stopped", tid)
		}
	}
	f.Thaw()
	checkThawed(t, pid, tids)
}

// TestFreezeTwice: a second Freeze of a frozen target fails (the threads
// are already traced) and leaves the first one's hold intact; both end
// with the target running. Freeze and Thaw from different goroutines.
func TestFreezeTwice(t *testing.T) {
	testutil.RequireRoot(t)
	pid, tids := freezeTarget(t)
	f1, err := Freeze(pid, tids)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var err2 error
	var f2 *Frozen
	wg.Add(1)
	go func() {
		defer wg.Done()
		f2, err2 = Freeze(pid, tids)
	}()
	wg.Wait()
	if err2 == nil {
		f2.Thaw()
		t.Errorf("a second Freeze of a frozen target succeeded")
	} else if !strings.Contains(err2.Error(), strconv.Itoa(pid)) {
		t.Errorf("the error does not name the pid: %v", err2)
	}
	for _, tid := range f1.Tids {
		if st, _ := taskStatus(pid, tid); !strings.HasPrefix(st, "t") {
			t.Errorf("tid %d no longer stopped after the failed second Freeze: %s", tid, st)
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); f1.Thaw() }()
	wg.Wait()
	checkThawed(t, pid, tids)
}

// TestFreezeManyCycles: a hundred freeze/thaw cycles on a spinning target
// leave it running and untraced.
func TestFreezeManyCycles(t *testing.T) {
	testutil.RequireRoot(t)
	pid, tids := freezeTarget(t)
	for i := 0; i < 100; i++ {
		f, err := Freeze(pid, tids)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		f.Thaw()
	}
	checkThawed(t, pid, tids)
}
