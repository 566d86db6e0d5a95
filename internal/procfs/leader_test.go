package procfs

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestTaskEnded: a live thread has not ended; a zombie (a child that
// exited, not yet waited for) and a thread gone from /proc have.
func TestTaskEnded(t *testing.T) {
	f := Default()
	me := os.Getpid()
	if f.TaskEnded(me, me) {
		t.Errorf("pid %d (this test) reads as ended", me)
	}
	if !f.TaskEnded(me, 1<<30) {
		t.Errorf("a thread that is not there reads as not ended")
	}
	c := exec.Command("/bin/true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	pid := c.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for !f.TaskEnded(pid, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d exited and was not waited for: still not ended after 10 s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if f.TaskLives(pid, pid) {
		t.Errorf("pid %d, a zombie, reads as alive", pid)
	}
}
