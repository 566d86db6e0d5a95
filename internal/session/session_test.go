package session

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestAttachErrors: the sentinel errors the CLI maps to exit codes.
func TestAttachErrors(t *testing.T) {
	if _, err := Attach(0); err == nil {
		t.Error("Attach(0) succeeded")
	}
	b, _ := os.ReadFile("/proc/sys/kernel/pid_max")
	max := 0
	for _, c := range strings.TrimSpace(string(b)) {
		max = max*10 + int(c-'0')
	}
	if _, err := Attach(max + 1); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Attach(pid_max+1): %v, want ErrNoProcess", err)
	}
	if _, err := Attach(2); !errors.Is(err, ErrKernelThread) {
		t.Errorf("Attach(2): %v, want ErrKernelThread", err)
	}
	if _, err := Attach(os.Getpid()); !errors.Is(err, ErrNotPython) {
		t.Errorf("Attach(self): %v, want ErrNotPython", err)
	}
}

// TestHostTidsSameNamespace: a target in our pid namespace needs no mapping.
func TestHostTidsSameNamespace(t *testing.T) {
	s := &Session{Pid: os.Getpid()}
	if m := s.hostTids(); m != nil {
		t.Errorf("hostTids of ourselves = %v, want nil", m)
	}
}

// TestSetSpecDescribe: the words of an agent's start line for a set.
func TestSetSpecDescribe(t *testing.T) {
	if got, want := (SetSpec{Pids: []int{7, 8}, Children: true, Cgroup: "/sys/fs/cgroup/app"}).Describe(), "2 more pid(s), children, cgroup /sys/fs/cgroup/app"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if got := (SetSpec{}).Describe(); got != "" {
		t.Errorf("empty spec: %q", got)
	}
}
