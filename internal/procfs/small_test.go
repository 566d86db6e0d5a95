package procfs

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestStatCommState(t *testing.T) {
	for _, c := range []struct{ in, comm, state string }{
		{"1234 (python3) S 1 1234 1234 0 -1 4194560 2045", "python3", "S"},
		{"77 (a (b) c) R 1 77", "a (b) c", "R"},
		{"9 () D 1", "", "D"},
		{"9 (x)) Z 1", "x)", "Z"},
	} {
		comm, state, err := statCommState([]byte(c.in))
		if err != nil || comm != c.comm || state != c.state {
			t.Errorf("statCommState(%q) = %q, %q, %v; want %q, %q", c.in, comm, state, err, c.comm, c.state)
		}
	}
	for _, bad := range []string{"", "12 python S", "12 (x)", "12 (x)S 1", ")( S"} {
		if _, _, err := statCommState([]byte(bad)); err == nil {
			t.Errorf("statCommState(%q): no error", bad)
		}
	}
}

func FuzzStatCommState(f *testing.F) {
	f.Add([]byte("1234 (python3) S 1 1234"))
	f.Add([]byte("77 (a (b) c) R 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		comm, state, err := statCommState(b)
		if err != nil {
			return
		}
		if len(state) != 1 || !bytes.Contains(b, []byte("("+comm+") "+state)) {
			t.Fatalf("%q: comm %q state %q not in the line", b, comm, state)
		}
	})
}

// The real files, against what the kernel says of this very thread.
func TestTaskStateSelf(t *testing.T) {
	pid, tid := os.Getpid(), unix.Gettid()
	st, err := Default().TaskState(pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(Default().taskPath(pid, tid, "comm"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(string(b), "\n"); st.Comm != want {
		t.Errorf("comm %q, /proc says %q", st.Comm, want)
	}
	if st.State != "R" || st.Syscall != -1 && st.Syscall < 0 {
		// Reading its own files, the thread is running.
		t.Errorf("state %q syscall %d for the reading thread itself", st.State, st.Syscall)
	}
	// A buffer smaller than the file grows.
	small, err := readSmall(Default().taskPath(pid, tid, "stat"), make([]byte, 4))
	full, _ := os.ReadFile(Default().taskPath(pid, tid, "stat"))
	if err != nil || len(small) < len(full)/2 || !bytes.HasPrefix(small, full[:20]) {
		t.Errorf("readSmall with a 4-byte buffer: %q, %v (os.ReadFile: %q)", small, err, full)
	}
	if _, err := readSmall(Default().taskPath(pid, 1<<30, "stat"), nil); err == nil {
		t.Error("readSmall of a missing task: no error")
	}
}

// A thread blocked in read(2) on a pipe, read by full path and through the
// open task directory: both say sleeping, in the kernel, in read.
func TestTaskDirStateBlockedRead(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	tidc := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		defer close(done)
		tidc <- unix.Gettid()
		var b [1]byte
		_, _ = unix.Read(p[0], b[:])
	}()
	tid := <-tidc
	defer func() { unix.Close(p[1]); <-done }()
	fs := Default()
	dir, err := fs.OpenTaskDir(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, errA := fs.TaskState(os.Getpid(), tid)
		b, errB := dir.State(tid)
		if errA != nil || errB != nil {
			t.Fatalf("TaskState: %v; TaskDir.State: %v", errA, errB)
		}
		// Entering its wait the thread is "S" a moment before it leaves
		// the CPU, and its wchan reads "0" until it has: wait for both
		// reads to see it settled.
		if a.Syscall == unix.SYS_READ && b.Syscall == unix.SYS_READ && a.Wchan != "" && b.Wchan != "" {
			if a != b || b.State != "S" {
				t.Fatalf("by path %+v, through the directory %+v: want both sleeping in read, in the same place", a, b)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader never seen blocked in read: by path %+v, through the directory %+v", a, b)
		}
		time.Sleep(time.Millisecond)
	}
}
