package output

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestLive: an existing file stays as it was until the first interval is
// whole, is then replaced, and grows by whole intervals; a run with no
// interval leaves it and no temporary.
func TestLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.jsonl")
	read := func() string { b, _ := os.ReadFile(path); return string(b) }
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLive(path, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "old\n" {
		t.Fatalf("before the first interval: %q", got)
	}
	for i := 1; i <= 3; i++ {
		if err := l.Interval(func(w io.Writer) error { _, err := fmt.Fprintf(w, "{\"i\": %d}\n", i); return err }); err != nil {
			t.Fatal(err)
		}
		want := ""
		for j := 1; j <= i; j++ {
			want += fmt.Sprintf("{\"i\": %d}\n", j)
		}
		if got := read(); got != want {
			t.Errorf("after interval %d: %q, want %q", i, got, want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	// No interval at all: the file as it was, no temporary left.
	l, err = OpenLive(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || read() != "{\"i\": 1}\n{\"i\": 2}\n{\"i\": 3}\n" {
		t.Errorf("after an empty run: %v, %q", ents, read())
	}
	if _, err := OpenLive(dir, 0o644); err == nil {
		t.Errorf("a directory as the output was accepted")
	}
}
