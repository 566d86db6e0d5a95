package stat

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/session"
)

// sleeper is a real, non-Python process that does nothing for a while.
func sleeper(t *testing.T) *session.Session {
	t.Helper()
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	s, _, err := session.AttachAny(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStatRunWindow: one window of an attached process, which sleeps:
// off-CPU, a complete window of about the length asked for.
func TestStatRunWindow(t *testing.T) {
	s := sleeper(t)
	res, err := Run(context.Background(), s, Options{Duration: 300 * time.Millisecond, Poll: 50 * time.Millisecond, NoPerf: true})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Stat
	if st.Pid != s.Pid || st.Mode != "window" || !st.Complete || res.ExitCode != 0 {
		t.Fatalf("pid %d mode %q complete %v exit %d", st.Pid, st.Mode, st.Complete, res.ExitCode)
	}
	if st.WindowS < 0.25 || st.WindowS > 5 {
		t.Errorf("window %.3fs, asked 0.3s", st.WindowS)
	}
	if len(st.Threads) != 1 {
		t.Errorf("threads: %+v", st.Threads)
	}
}

// TestStatStream: -i reports every interval until the duration, each an
// interval of its own.
func TestStatStream(t *testing.T) {
	s := sleeper(t)
	var got []*Result
	err := Stream(context.Background(), s, Options{Duration: 450 * time.Millisecond, Interval: 200 * time.Millisecond, Poll: 50 * time.Millisecond, NoPerf: true},
		func(r *Result) error { got = append(got, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 1 || len(got) > 3 {
		t.Fatalf("%d reports for 450ms at 200ms", len(got))
	}
	for _, r := range got {
		if r.Stat.Mode != "interval" {
			t.Errorf("mode %q", r.Stat.Mode)
		}
	}
}

// TestStatRunGone: the target vanishes mid-window: the report covers up
// to the last read and says so.
func TestStatRunGone(t *testing.T) {
	c := exec.Command("sleep", "0.2")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go c.Wait()
	s, _, err := session.AttachAny(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), s, Options{Duration: 3 * time.Second, Poll: 20 * time.Millisecond, NoPerf: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stat.Complete || res.Stat.WindowS > 2 {
		t.Errorf("complete %v window %.2fs: the exit was not seen", res.Stat.Complete, res.Stat.WindowS)
	}
}
