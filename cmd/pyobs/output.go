package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
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
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("can't write %s: it is a directory", path)
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

// liveOutput is where a live (-i) command streams its reports: stdout, or
// -o FILE written as it goes (not replaced whole). An empty format means
// text on a terminal, JSON lines otherwise.
func liveOutput(g *globals, format string) (out io.Writer, tty bool, _ string, closeOut func(), _ error) {
	out, tty, closeOut = io.Writer(os.Stdout), isTerminal(os.Stdout), func() {}
	if g.output != "" && g.output != "-" {
		fh, err := os.OpenFile(g.output, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, false, "", nil, fmt.Errorf("can't create %s: %w", g.output, err)
		}
		out, tty, closeOut = fh, false, func() { fh.Close() }
	}
	if format == "" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	return out, tty, format, closeOut, nil
}

// profileFormat is the profile format a command writes: --format, else the
// one -o's file name implies; binary formats need -o.
func profileFormat(command string, g *globals) (string, error) {
	format := g.format
	if format == "" {
		format = flame.FormatFor(g.output)
	}
	if !flame.Known(format) {
		return "", usagef("%s: unknown --format %q (%s)", command, format, strings.Join(flame.Formats(), ", "))
	}
	if flame.Binary(format) && (g.output == "" || g.output == "-") {
		return "", usagef("%s: %s output is binary: give -o FILE", command, format)
	}
	return format, nil
}

// writeFlame writes a profile in a format, to stdout or -o atomically.
func writeFlame(out, format string, p *flame.Profile, o flame.WriteOptions) error {
	return writeOutput(out, 0o644, func(w io.Writer) error { return flame.Write(w, format, p, o) })
}
