package procfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sleeper starts `sleep 60`, killed (and continued first) at the end.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// stopped sends SIGSTOP and waits until /proc says T: the process's own
// account of its stop.
func stopped(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if st, err := Default().TaskStat(pid, pid); err == nil && st.State == "T" {
			return
		}
	}
	t.Fatalf("pid %d not stopped 5 s after SIGSTOP", pid)
}

// TestStopWatchSet: a set's watch counts the stopped member's thread
// among all the members' threads, says which process it was, and keeps
// a running member out of the per-process accounts; the stopped member
// listed first (its first look decides nothing alone). A member that
// exits (reaped: gone from /proc) leaves the set's account whole and is
// listed once even when the list repeats it.
func TestStopWatchSet(t *testing.T) {
	stop, run := sleeper(t), exec.Command("sleep", "60")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	stopped(t, stop)
	var mu sync.Mutex
	pids := []int{stop, run.Process.Pid, stop}
	list := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), pids...)
	}
	t0 := time.Now()
	w := WatchStopsOf(Default(), list, true)
	time.Sleep(250 * time.Millisecond)
	_ = run.Process.Kill()
	_ = run.Wait() // reaped: its /proc entry gone
	time.Sleep(250 * time.Millisecond)
	all := w.End()
	watched := time.Since(t0).Seconds()
	if all == nil || all.Threads != 1 || all.Of != 2 || all.Processes != 1 || all.Members != 2 || all.State != "T" {
		t.Fatalf("set's account %+v: want 1 of 2 threads, in 1 of 2 processes, state T", all)
	}
	// Stopped through the whole watch, to a look's period.
	if all.Seconds < watched-StopLook.Seconds() || all.Seconds > watched+0.001 {
		t.Errorf("stopped %.3fs over a %.3fs watch", all.Seconds, watched)
	}
	if who := all.Who(); !strings.Contains(who, "1 of the set's 2 threads (in 1 of its 2 processes)") {
		t.Errorf("Who() = %q", who)
	}
	each := w.Each()
	if len(each) != 1 || each[stop] == nil || each[stop].Threads != 1 || each[stop].Of != 1 || each[stop].Members != 0 {
		t.Errorf("per process %v: want the stopped one alone, 1 of its 1 thread", each)
	}
	if each[stop] != nil && each[stop].Seconds != all.Seconds {
		t.Errorf("the stopped process's %.3fs differs from the set's %.3fs", each[stop].Seconds, all.Seconds)
	}
}

// TestStopWatchMemberLeaves: a stopped member that leaves the set (it
// exited) has its stop counted up to the look that found it gone, not
// beyond, whether it is listed gone or no longer listed.
func TestStopWatchMemberLeaves(t *testing.T) {
	for _, listed := range []bool{true, false} {
		keep := sleeper(t)
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		gone := cmd.Process.Pid
		stopped(t, gone)
		var mu sync.Mutex
		pids := []int{keep, gone}
		w := WatchStopsOf(Default(), func() []int {
			mu.Lock()
			defer mu.Unlock()
			return append([]int(nil), pids...)
		}, true)
		t0 := time.Now()
		time.Sleep(350 * time.Millisecond) // its exit half a look after a look
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		left := time.Since(t0).Seconds()
		if !listed {
			mu.Lock()
			pids = []int{keep}
			mu.Unlock()
		}
		time.Sleep(400 * time.Millisecond)
		w.End()
		s := w.Each()[gone]
		if s == nil || s.Seconds < left-0.02 || s.Seconds > left+StopLook.Seconds()+0.05 {
			t.Errorf("listed after its exit %v: its stop %+v, want about the %.3fs it lived stopped", listed, s, left)
		}
	}
}

// TestStopWatchBoundedCost: a watch over a process of many threads (a
// fixture tree of 4,000 task stat files, one of them stopped) looks less
// often than every StopLook when a look costs more than StopShare of
// that, and says the period it kept (LookMS). Truth: one look, timed
// here.
func TestStopWatchBoundedCost(t *testing.T) {
	root := t.TempDir()
	const pid, n = 4242, 4000
	for i := 0; i < n; i++ {
		dir := filepath.Join(root, strconv.Itoa(pid), "task", strconv.Itoa(pid+i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		state := "S"
		if i == 7 {
			state = "T"
		}
		stat := fmt.Sprintf("%d (worker) %s 1 %d %d 0 -1 0 0 0 0 0 0 0 0 0 20 0 %d 0 0 0 0\n", pid+i, state, pid, pid, n)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := FS{root: root}
	// One look, timed alone: what the watch pays each time.
	t0 := time.Now()
	w0 := WatchStops(fs, pid, true)
	one := time.Since(t0)
	w0.End()
	w := WatchStops(fs, pid, true)
	time.Sleep(200 * time.Millisecond)
	s := w.End()
	if s == nil || s.Threads != 1 || s.Of != n {
		t.Fatalf("account %+v: want 1 of %d threads stopped", s, n)
	}
	want := max(StopLook, time.Duration(float64(one)/StopShare))
	t.Logf("one look %v: period %d ms (want about %v)", one, s.LookMS, want)
	if one > StopLook/50 && s.LookMS <= int(StopLook/time.Millisecond) {
		t.Errorf("a look takes %v (over %v of %v) but the watch kept looking every %d ms", one, StopShare, StopLook, s.LookMS)
	}
}
