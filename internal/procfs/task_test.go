package procfs

import "testing"

func TestParseSyscallFile(t *testing.T) {
	cases := map[string]int{
		"running\n": -1,
		"202 0x7f3a2c1b4b80 0x80 0x0 0x0 0x0 0x0 0x7ffd5c0e0a88 0x7f3a2c2a3e2e\n": 202,
		"230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffc 0x7f":                              230,
		"-1 0x7ffd 0x7f\n": -1,
		"":                 -2,
		"garbage":          -2,
		"99999999 0x0":     -2,
	}
	for in, want := range cases {
		if got := ParseSyscallFile(in); got != want {
			t.Errorf("ParseSyscallFile(%q) = %d, want %d", in, got, want)
		}
	}
}

func FuzzParseSyscallFile(f *testing.F) {
	f.Add("running")
	f.Add("202 0x7f3a2c1b4b80 0x80 0x0 0x0 0x0 0x0 0x7ffd5c0e0a88 0x7f3a2c2a3e2e")
	f.Fuzz(func(t *testing.T, s string) {
		n := ParseSyscallFile(s)
		if n < -2 || n > 1<<16 {
			t.Fatalf("out of range: %d", n)
		}
		_ = TaskState{State: "S", Syscall: n}.Describe()
	})
}
