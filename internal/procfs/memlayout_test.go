package procfs

import (
	"os"
	"testing"
)

// TestMemLayoutSelf: this process's layout reads, non-zero, and the same
// twice (no exec between).
func TestMemLayoutSelf(t *testing.T) {
	f, err := NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := f.MemLayout(os.Getpid())
	b, ok2 := f.MemLayout(os.Getpid())
	if !ok || !ok2 || a != b || a[0] == 0 {
		t.Fatalf("layout %v (%v), then %v (%v)", a, ok, b, ok2)
	}
}

// TestParseMemLayout: a comm holding ") " is skipped to its last ')'; a
// zombie's all-zero layout and a short line are not a layout.
func TestParseMemLayout(t *testing.T) {
	line := "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 1000 10 18446744073709551615 4194304 4198400 140737488347136 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 6295552 6296000 6297600 140737488350000 140737488350100 140737488350100 140737488351000 0\n"
	l, ok := parseMemLayout([]byte(line))
	want := MemLayout{4194304, 4198400, 140737488347136, 6295552, 6296000, 6297600, 140737488350000, 140737488350100, 140737488350100, 140737488351000}
	if !ok || l != want {
		t.Fatalf("%v %v, want %v", l, ok, want)
	}
	zero := "42 (z) Z 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	if _, ok := parseMemLayout([]byte(zero)); ok {
		t.Error("a zombie's zero layout read as one")
	}
	if _, ok := parseMemLayout([]byte("42 (short) S 1 2 3\n")); ok {
		t.Error("a short line read as a layout")
	}
}

func FuzzParseMemLayout(f *testing.F) {
	f.Add([]byte("1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1000 10 0 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 4 5 6 7 8 9 10 0\n"))
	f.Add([]byte(")))"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, ok := parseMemLayout(b)
		if ok && l == (MemLayout{}) {
			t.Fatal("ok with an all-zero layout")
		}
	})
}
