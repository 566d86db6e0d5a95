package pyframes

import "testing"

// TestWithin: a frame address from a torn read (below the copy, past it,
// or so high that addr+size wraps) is never an index into the copy.
func TestWithin(t *testing.T) {
	win := make([]byte, 8192)
	const base, size = 0x10000, 80
	cases := []struct {
		addr uint64
		want bool
	}{
		{base, true},
		{base + 8192 - size, true},
		{base + 8192 - size + 1, false},
		{base - 1, false},
		{^uint64(0) - 10, false}, // addr+size wraps
		{0, false},
	}
	for _, c := range cases {
		if got := within(c.addr, size, base, win); got != c.want {
			t.Errorf("within(0x%x): %v, want %v", c.addr, got, c.want)
		}
	}
	if within(base, size, base, nil) || within(base, size, base, win[:size-1]) {
		t.Error("an empty or too short copy holds no frame")
	}
}
