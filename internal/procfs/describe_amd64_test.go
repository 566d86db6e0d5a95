package procfs

import "testing"

// x86_64 numbers: futex is 202, read 0.
func TestDescribe(t *testing.T) {
	cases := []struct {
		st   TaskState
		want string
	}{
		{TaskState{State: "R", Syscall: -1}, "running"},
		{TaskState{State: "S", Wchan: "futex_wait_queue", Syscall: 202}, "sleeping in futex_wait_queue (futex)"},
		{TaskState{State: "D", Wchan: "io_schedule", Syscall: 0}, "disk in io_schedule (read)"},
		{TaskState{State: "Z"}, "zombie"},
		{TaskState{State: "t", Syscall: -2}, "tracing stop"},
		{TaskState{State: "S", Syscall: 9999}, "sleeping (syscall_9999)"},
	}
	for _, c := range cases {
		if got := c.st.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.st, got, c.want)
		}
	}
}
