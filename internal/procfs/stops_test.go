package procfs

import (
	"os/exec"
	"strings"
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
// a running member out of the per-process accounts. A member that exits
// meanwhile leaves the set's account whole.
func TestStopWatchSet(t *testing.T) {
	run, stop, gone := sleeper(t), sleeper(t), sleeper(t)
	stopped(t, stop)
	pids := []int{run, stop, gone}
	w := WatchStopsOf(Default(), func() []int { return pids }, true)
	time.Sleep(250 * time.Millisecond)
	_ = syscall.Kill(gone, syscall.SIGKILL)
	time.Sleep(250 * time.Millisecond)
	began := time.Now()
	all := w.End()
	held := time.Since(began)
	if all == nil || all.Threads != 1 || all.Of != 3 || all.Processes != 1 || all.Members != 3 || all.State != "T" {
		t.Fatalf("set's account %+v: want 1 of 3 threads, in 1 of 3 processes, state T", all)
	}
	// Stopped through the whole watch (~0.5 s), to a look's period.
	if all.Seconds < 0.5-StopLook.Seconds()-held.Seconds() || all.Seconds > 0.5+StopLook.Seconds()+held.Seconds() {
		t.Errorf("stopped %.3fs over a 0.5 s watch", all.Seconds)
	}
	if who := all.Who(); !strings.Contains(who, "1 of the set's 3 threads (in 1 of its 3 processes)") {
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

// TestStopWatchFollow: a watch on one process that goes on as a set's
// sees a stop of a process that joined.
func TestStopWatchFollow(t *testing.T) {
	first, later := sleeper(t), sleeper(t)
	w := WatchStops(Default(), first, true)
	stopped(t, later)
	time.Sleep(150 * time.Millisecond)
	if s := w.Seconds(); s != 0 {
		t.Fatalf("a process outside the watch counted: %.3fs", s)
	}
	w.Follow(func() []int { return []int{first, later} })
	time.Sleep(350 * time.Millisecond)
	all := w.End()
	if all == nil || all.Threads != 1 || all.Of != 2 || all.Members != 2 || all.Seconds < 0.1 {
		t.Fatalf("after Follow: %+v, want 1 of 2 threads stopped for a while", all)
	}
}
