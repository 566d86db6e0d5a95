package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestVforkWaitNotDiskIO: a program that runs subprocesses in a loop
// waits in vfork, in uninterruptible sleep (D), for each child's exec: no
// device. stat gives no blocking-io verdict for it (it gave one, and sent
// the user to iostat) and offcpu puts under 5 % of its off-CPU time in
// disk I/O (0.96 s of ~3 s was there).
func TestVforkWaitNotDiskIO(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "spawn_loop.py")
	st, r := statJSON(t, "-p", fmt.Sprint(tg.Pid), "-d", "2s", "--no-perf", "--poll", "10ms")
	if r.Code != 0 {
		t.Fatalf("stat: exit %d: %s", r.Code, r.Stderr)
	}
	if hasVerdict(st, "blocking-io") {
		t.Errorf("stat verdicts %v: blocking-io for a vfork loop", st.Verdicts)
	}
	o := testutil.Run(t, 60*time.Second, "offcpu", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "--threads", "--format", "json")
	if o.Code != 0 {
		t.Fatalf("offcpu: exit %d: %s", o.Code, o.Stderr)
	}
	var out offcpuJSON
	if err := json.Unmarshal([]byte(o.Stdout), &out); err != nil {
		t.Fatal(err)
	}
	var off, disk float64
	for _, th := range out.Result.Threads {
		off += th.OffCPUS
		disk += th.ClassS["disk I/O"]
	}
	t.Logf("offcpu: %.3fs off CPU, %.3fs of it disk I/O; stat verdicts %v", off, disk, st.Verdicts)
	if off < 0.2 {
		t.Fatalf("%.3fs off CPU: the loop did not wait", off)
	}
	if disk > 0.05*off {
		t.Errorf("%.3fs of %.3fs off CPU classed disk I/O: the vfork wait is not I/O", disk, off)
	}
}
