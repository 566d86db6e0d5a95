package trace

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestTextHeaderOneCount (issue #16 edge 11): the header's count of calls
// is the table's; exits the table does not count are said, with why.
func TestTextHeaderOneCount(t *testing.T) {
	r := &Result{Account: Account{Pid: 7, Engine: "ptrace", Wall: time.Second, Calls: 2409, Restarted: 150, Threads: 1},
		Syscalls: []SyscallJSON{{Name: "futex", CallStats: CallStats{Calls: 2217, TotalS: 0.5}}}}
	var b bytes.Buffer
	if err := WriteText(&b, r, false); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(b.String(), "\n")
	for _, w := range []string{"2217 calls (of 2409 syscall exits seen; not counted: 150 interrupted and restarted by the kernel, 42 outside -e)"} {
		if !strings.Contains(head, w) {
			t.Errorf("header %q lacks %q", head, w)
		}
	}
	r.Account.Calls, r.Account.Restarted = 2217, 0
	b.Reset()
	_ = WriteText(&b, r, false)
	if head, _, _ := strings.Cut(b.String(), "\n"); !strings.HasSuffix(head, ", 2217 calls") {
		t.Errorf("header %q: want just the table's 2217 calls", head)
	}
}

// TestTextWallLegend (edge 10): with several threads %wall (summed over
// them) can pass 100: the table says so; one thread needs no legend.
func TestTextWallLegend(t *testing.T) {
	r := &Result{Account: Account{Pid: 7, Engine: "tracepoint", Wall: time.Second, Calls: 10, Threads: 3},
		Syscalls: []SyscallJSON{{Name: "futex", CallStats: CallStats{Calls: 10, TotalS: 2.4}, PctWall: 240}}}
	var b bytes.Buffer
	_ = WriteText(&b, r, false)
	if !strings.Contains(b.String(), "%wall: time in the call over the 1.00s window, summed over the 3 threads (so up to 300 %)") {
		t.Errorf("no %%wall legend:\n%s", b.String())
	}
	r.Account.Threads = 1
	b.Reset()
	_ = WriteText(&b, r, false)
	if strings.Contains(b.String(), "summed over") {
		t.Errorf("legend for one thread:\n%s", b.String())
	}
}
