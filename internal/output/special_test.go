package output

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSpecialFilesAreNotReplaced: -o naming a device or a FIFO (pyobs … -o
// /dev/null) writes into it; renaming a temporary over it would turn the
// device into a regular file for every process on the machine.
func TestSpecialFilesAreNotReplaced(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	for _, live := range []bool{false, true} {
		got := make(chan string, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- "open: " + err.Error()
				return
			}
			b, _ := io.ReadAll(f)
			f.Close()
			got <- string(b)
		}()
		var err error
		if live {
			var l *Live
			if l, err = OpenLive(fifo, 0o644); err == nil {
				err = l.Interval(func(w io.Writer) error { _, err := io.WriteString(w, "report\n"); return err })
				if cerr := l.Close(); err == nil {
					err = cerr
				}
			}
		} else {
			err = Write(fifo, 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "report\n"); return err })
		}
		if err != nil {
			t.Fatalf("live %v: %v", live, err)
		}
		select {
		case s := <-got:
			if s != "report\n" {
				t.Errorf("live %v: the FIFO's reader got %q", live, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("live %v: the FIFO's reader got nothing in 5 s (was the FIFO replaced?)", live)
		}
		fi, err := os.Lstat(fifo)
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("live %v: %s is no longer a FIFO (%v, %v)", live, fifo, fi.Mode(), err)
		}
	}
}
