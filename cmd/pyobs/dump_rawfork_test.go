package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpForkWithoutPython: a child forked through the C library's fork()
// keeps its parent's thread states, their ids the parent's threads'. dump
// gives its one thread the id the kernel gives it (the child's pid, as the
// child says), and marks the three states left from the parent's other
// threads as no thread of this process (tid 0), with no native unwind
// tried for them. Before, all four were listed as live threads under the
// parent's ids, and --native counted every one as failed.
func TestDumpForkWithoutPython(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			tg := testutil.Start(t, testutil.Find(t, label), "raw_fork.py")
			var child, native int
			select {
			case l := <-tg.Lines:
				if _, err := fmt.Sscanf(l, "CHILD %d %d", &child, &native); err != nil {
					t.Fatalf("child said %q", l)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the child did not say its pid")
			}
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			for _, native := range []bool{false, true} {
				args := []string{"-p", fmt.Sprint(child)}
				if native {
					args = append(args, "--native")
				}
				d := dumpJSON(t, args...)
				live, left := 0, 0
				for _, th := range d.Threads {
					switch {
					case th.Tid == child && !th.NoThread:
						live++
					case th.Tid == 0 && th.NoThread:
						left++
					default:
						t.Errorf("native %v: thread %q tid %d no_thread %v: want the child's %d, or 0 marked no thread", native, th.Name, th.Tid, th.NoThread, child)
					}
				}
				if live != 1 || left != 3 {
					t.Errorf("native %v: %d threads with the child's id, %d marked no thread: want 1 and 3", native, live, left)
				}
				if native && (d.Native == nil || d.Native.Failed != 0) {
					t.Errorf("--native: %+v, want no failed unwind", d.Native)
				}
			}
		})
	}
}
