package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeOutput writes to stdout, or to path atomically: a temporary file in
// the same directory, renamed over path only once complete, so an existing
// file is replaced by a whole new one or not at all.
func writeOutput(path string, mode os.FileMode, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		w := bufio.NewWriter(os.Stdout)
		if err := write(w); err != nil {
			return err
		}
		return w.Flush()
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
	w := bufio.NewWriter(tmp)
	if err := write(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("can't write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("can't write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("can't replace %s: %w", path, err)
	}
	ok = true
	return nil
}
