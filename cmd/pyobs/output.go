package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/output"
)

// liveOutput is where a live (-i) command puts its reports, one whole
// interval at a time (output.Live). An empty format means text on a
// terminal, JSON lines otherwise.
func liveOutput(g *globals, format string) (*output.Live, string, error) {
	out, err := output.OpenLive(g.output, 0o644)
	if err == nil && format == "" {
		format = map[bool]string{true: "text", false: "json"}[out.TTY()]
	}
	return out, format, err
}

// interval writes one live report: a JSON line, or a text table (redrawn
// in place on a terminal).
func interval(out *output.Live, format string, json, text func(io.Writer) error) error {
	return out.Interval(func(w io.Writer) error {
		if format == "json" {
			return json(w)
		}
		if out.TTY() {
			fmt.Fprint(w, "\x1b[H\x1b[2J")
		}
		err := text(w)
		if !out.TTY() {
			fmt.Fprintln(w)
		}
		return err
	})
}

// profileFormat is the profile format a command writes: --format, else the
// one -o's file name implies (text, for a command that has a text report,
// on stdout); binary formats need -o.
func profileFormat(command string, g *globals, text bool) (string, error) {
	names, format := flame.Formats(), g.format
	toFile := output.ToFile(g.output)
	if text {
		names = append([]string{"text"}, names...)
	}
	if format == "" && text && !toFile {
		format = "text"
	} else if f, err := flame.FormatFor(g.output); format == "" && err != nil {
		return "", usagef("%s: -o: %w: give --format (%s) or a known extension", command, err, strings.Join(flame.Formats(), ", "))
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

// textFormat is --format for a command that writes a text or JSON report
// (absent: json when -o names a .json file, as record's -o picks its
// format by extension; else def).
func textFormat(command string, g *globals, def string) (string, error) {
	switch g.format {
	case "":
		if output.ToFile(g.output) && strings.HasSuffix(strings.ToLower(g.output), ".json") {
			return "json", nil
		}
		return def, nil
	case "text", "json":
		return g.format, nil
	}
	return "", usagef("%s: unknown --format %q (text, json)", command, g.format)
}
