package output

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Write writes to stdout, or to path atomically: a temporary file in
// the same directory, renamed over path only once complete, so an existing
// file is replaced by a whole new one or not at all.
func Write(path string, mode os.FileMode, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		w := bufio.NewWriterSize(os.Stdout, 64<<10) // a 50-thread dump in two writes
		if err := write(w); err != nil {
			return err
		}
		return w.Flush()
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("can't write %s: it is a directory", path)
	} else if err == nil && !fi.Mode().IsRegular() {
		return writeThrough(path, write)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("can't create output in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("can't set mode of %s: %w", tmp.Name(), err)
	}
	w := bufio.NewWriterSize(tmp, 64<<10)
	if err := write(w); err != nil {
		return writeError(path, tmp.Name(), err)
	}
	if err := w.Flush(); err != nil {
		return writeError(path, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return writeError(path, tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("can't replace %s: %w", path, err)
	}
	ok = true
	return nil
}

// writeError names the output, not its temporary, when writing fails
// (EFBIG, ENOSPC, EIO): "can't write out.svg: no space left on device".
func writeError(path, tmp string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == tmp {
		return fmt.Errorf("can't write %s: %w", path, pe.Err)
	}
	return fmt.Errorf("can't write %s: %w", path, err)
}

// ToFile reports whether path names a file (not stdout: "" or "-").
func ToFile(path string) bool { return path != "" && path != "-" }

// Where names the output for a footer: the file, or "stdout".
func Where(path string) string {
	if ToFile(path) {
		return path
	}
	return "stdout"
}

// writeThrough writes into a path that is not a regular file (/dev/null, a
// FIFO, a terminal): renaming a temporary over it would replace the device
// with a file, so the bytes go to it as they come.
func writeThrough(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("can't open %s: %w", path, err)
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("can't write %s: %w", path, err)
	}
	return nil
}

// Check tells, before anything is observed, whether Write could put a file
// at path: its directory exists and takes a new file (one is created and
// removed, which also catches a read-only mount and a full inode table), and
// path is not a directory. stdout and non-regular files (/dev/null, a FIFO)
// pass. The error names path and the reason, never the probe's name.
func Check(path string) error {
	if !ToFile(path) {
		return nil
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("can't write %s: it is a directory", path)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			// ENOENT also comes from a directory that exists but makes no
			// new entries (/proc, /sys): only a missing one is named missing.
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return fmt.Errorf("can't create %s: %w (the directory %s exists but takes no new files: a virtual file system such as /proc or /sys?)", path, err, dir)
			}
			return fmt.Errorf("can't write %s: directory %s does not exist", path, dir)
		case errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("can't write %s: %s is not a directory", path, dir)
		}
		return fmt.Errorf("can't write %s: directory %s: %w", path, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}
