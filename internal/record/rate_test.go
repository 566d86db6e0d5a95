package record

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/procfs"
)

// TestHonoured (issue #16 edge 5): cpu mode caps -F at the kernel's
// perf_event_max_sample_rate with a note; timer modes far above what a
// tick can read say so; rates that can be honoured say nothing.
func TestHonoured(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sys/kernel/perf_event_max_sample_rate")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("25000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode       string
		freq, want int
		note       []string
	}{
		{"cpu", 99, 99, nil},
		{"cpu", 25000, 25000, nil},
		{"cpu", 100000, 25000, []string{"-F 100000", "perf_event_max_sample_rate=25000", "recording at 25000 Hz"}},
		{"wall", 999, 999, nil},
		{"wall", 100000, 100000, []string{"-F 100000 in wall mode", "every thread", "achieved rate"}},
		{"gil", 5000, 5000, []string{"GIL holder"}},
	} {
		got, note := Honoured(fs, c.mode, c.freq)
		if got != c.want || (note == "") != (c.note == nil) || strings.Contains(note, "\n") {
			t.Errorf("%s -F %d: %d, %q; want %d and a note: %v", c.mode, c.freq, got, note, c.want, c.note != nil)
		}
		for _, w := range c.note {
			if !strings.Contains(note, w) {
				t.Errorf("%s -F %d: note %q lacks %q", c.mode, c.freq, note, w)
			}
		}
	}
}
