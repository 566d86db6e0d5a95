package output

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Live is where a live command (-i) puts its reports, one interval at a
// time: stdout as they come, or a file that only ever holds whole
// intervals. The file is written as a temporary next to path, renamed over
// path once the first interval is complete (until then an existing file
// is left as it was), and then grows by one whole interval per write(2):
// a reader, or a SIGKILL, sees the old file or a new one of complete
// intervals, never half a report.
type Live struct {
	path    string
	f       *os.File // nil: stdout
	tmp     string   // the temporary's name until it is renamed over path
	tty     bool
	buf     bytes.Buffer
	written bool
}

// OpenLive opens path ("" or "-": stdout) for live reports; mode is the
// file's permission bits.
func OpenLive(path string, mode os.FileMode) (*Live, error) {
	if path == "" || path == "-" {
		return &Live{tty: IsTerminal(os.Stdout)}, nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("can't write %s: it is a directory", path)
	} else if err == nil && !fi.Mode().IsRegular() {
		// A device or FIFO is written as it is, never replaced (writeThrough).
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("can't open %s: %w", path, err)
		}
		return &Live{path: path, f: f, written: true}, nil
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("can't create output in %s: %w", dir, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("can't set mode of %s: %w", f.Name(), err)
	}
	return &Live{path: path, f: f, tmp: f.Name()}, nil
}

// TTY reports whether the reports go to a terminal (redrawn in place).
func (l *Live) TTY() bool { return l.tty }

// Interval writes one interval's report: rendered whole, then written in
// one write(2) (and, the first time, renamed over path).
func (l *Live) Interval(write func(io.Writer) error) error {
	l.buf.Reset()
	if err := write(&l.buf); err != nil {
		return err
	}
	if l.f == nil {
		_, err := os.Stdout.Write(l.buf.Bytes())
		return err
	}
	if _, err := l.f.Write(l.buf.Bytes()); err != nil {
		return writeError(l.path, l.f.Name(), err)
	}
	if !l.written {
		if err := os.Rename(l.tmp, l.path); err != nil {
			return fmt.Errorf("can't replace %s: %w", l.path, err)
		}
		l.written, l.tmp = true, ""
	}
	return nil
}

// Close closes the file; with no interval written, the temporary is
// removed and an existing file at path stays as it was.
func (l *Live) Close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	if l.tmp != "" {
		os.Remove(l.tmp)
	}
	if err != nil {
		return fmt.Errorf("can't write %s: %w", l.path, err)
	}
	return nil
}

// IsTerminal reports whether f is a terminal (live views redraw in place;
// progress lines go there only).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
