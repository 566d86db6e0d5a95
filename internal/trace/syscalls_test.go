package trace

import "testing"

func TestParseSyscallList(t *testing.T) {
	m, err := ParseSyscalls("openat, newfstatat")
	if err != nil || len(m) != 2 || !m[257] || !m[262] {
		t.Fatalf("%v %v", m, err)
	}
	if m, err := ParseSyscalls(""); m != nil || err != nil {
		t.Fatal("empty list should mean all")
	}
	if editDistance("opnat", "openat") != 1 {
		t.Fatal("edit distance")
	}
}
