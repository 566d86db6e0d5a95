package dump

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestSpawnLockDump: a spawned target (this process is its parent, and a
// goroutine waits for its exit) can be frozen for --lock again and again:
// the exit waiter must not take the ptrace stops Freeze waits for. The
// target is then running, untraced, and its exit status comes through.
func TestSpawnLockDump(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	argv := append(append([]string{}, in.Argv...), "-c",
		"import sys, threading, time\n"+
			"threading.Thread(target=lambda: time.sleep(600), daemon=True).start()\n"+
			"def wait():\n    time.sleep(1.5)\nwait()\nsys.exit(5)")
	s, err := session.Spawn(argv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitPython(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		done := make(chan struct{})
		var d *Dump
		go func() { defer close(done); d, err = Run(context.Background(), s, Options{Lock: true}) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("dump --lock %d of a spawned target did not return (its ptrace stop was taken by the exit waiter?)", i)
		}
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		if d.Read.Method != "ptrace-stopped" || len(d.Threads) == 0 {
			t.Fatalf("dump %d: %+v", i, d.Read)
		}
		select {
		case <-s.Exited():
			t.Fatalf("after dump %d the session believes the target exited (status %d)", i, s.ExitCode())
		default:
		}
		st := testutil.ProcStatus(s.Pid)
		if st["TracerPid"] != "0" || strings.HasPrefix(st["State"], "t") || strings.HasPrefix(st["State"], "T") {
			t.Errorf("after dump %d: TracerPid %s State %s", i, st["TracerPid"], st["State"])
		}
	}
	code, err := s.Wait(ctx)
	if err != nil || code != 5 {
		t.Errorf("exit status %d (%v), want 5", code, err)
	}
}
