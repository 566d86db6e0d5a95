package offcpu

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSchedRunTime: a thread's scheduler run time grows by the CPU time
// the thread's own clock (CLOCK_THREAD_CPUTIME_ID) says it burnt.
func TestSchedRunTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := os.Getpid(), unix.Gettid()
	cpu := func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			t.Fatal(err)
		}
		return ts.Nano()
	}
	r0, ok := schedRunTime(pid, tid)
	if !ok {
		t.Skip("no /proc/PID/task/TID/schedstat (CONFIG_SCHED_INFO off)")
	}
	c0 := cpu()
	for x := 0; cpu()-c0 < 50e6; x++ {
	}
	r1, _ := schedRunTime(pid, tid)
	c1 := cpu()
	if d, want := r1-r0, c1-c0; d < want*9/10 || d > want*11/10+2e6 {
		t.Errorf("schedstat run time grew %d ns, the thread's CPU clock %d ns", d, want)
	}
	if _, ok := schedRunTime(pid, 1<<30); ok {
		t.Error("a thread that does not exist has a run time")
	}
}
