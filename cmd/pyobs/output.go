package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/output"
)

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
// one -o's file name implies (text, for a command that has a text report,
// on stdout); binary formats need -o.
func profileFormat(command string, g *globals, text bool) (string, error) {
	names, format := flame.Formats(), g.format
	toFile := g.output != "" && g.output != "-"
	if text {
		names = append([]string{"text"}, names...)
	}
	if format == "" && text && !toFile {
		format = "text"
	} else if f, err := flame.FormatFor(g.output); format == "" && err != nil {
		return "", usagef("%s: %w", command, err)
	} else if format == "" {
		format = f
	}
	if !slices.Contains(names, format) {
		return "", usagef("%s: unknown --format %q (%s)", command, format, strings.Join(names, ", "))
	}
	if flame.Binary(format) && !toFile {
		return "", usagef("%s: %s output is binary: give -o FILE", command, format)
	}
	return format, nil
}

// writeFlame writes a profile in a format, to stdout or -o atomically.
func writeFlame(out, format string, p *flame.Profile, o flame.WriteOptions) error {
	return output.Write(out, 0o644, func(w io.Writer) error { return flame.Write(w, format, p, o) })
}
