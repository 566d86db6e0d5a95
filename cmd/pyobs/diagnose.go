package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/diagnose"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/session"
)

func newDiagnose(g *globals) *cobra.Command {
	var dur time.Duration
	c := &cobra.Command{
		Use:   "diagnose (-p PID | -- CMD ARGS)",
		Short: "Count, decide, then sample or trace: findings, what was ruled out, and the price (the whole procedure)",
		Long: `diagnose runs the observation procedure within -d: counters (stat), the
decision (throttled, queued, on-CPU, off-CPU, both), a CPU profile and/or
the waits with their wakers, a narrow trace when a wait names a syscall,
and a Python dump. Output: text, --format json, or -o FILE.html (one
self-contained page with the flame graphs). Ctrl-C reports the phases done.
See README "pyobs diagnose" and docs/json.md.`,
		Example: "  pyobs diagnose -p 4242 -d 30s -o report.html",
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			format := g.format
			if format == "" && strings.HasSuffix(strings.ToLower(g.output), ".html") {
				format = "html"
			}
			if format != "" && format != "text" && format != "json" && format != "html" {
				return usagef("diagnose: unknown --format %q (text, json, html)", format)
			}
			if dur < 2*time.Second {
				return usagef("diagnose: -d must be at least 2s (counting alone takes 1s)")
			}
			s, err := openTarget(cmd, g, args, session.PythonRequired)
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			rep, err := diagnose.Run(cmd.Context(), s, diagnose.Options{Duration: dur,
				Progress: func(l string) { fmt.Fprintln(stderr, "pyobs diagnose: "+l) }})
			if err == nil {
				err = output.Write(g.output, 0o644, func(w io.Writer) error { return diagnose.Write(w, format, rep) })
			}
			if err != nil {
				abort(s)
				return err
			}
			return finish(cmd.Context(), s)
		},
	}
	c.Flags().DurationVarP(&dur, "duration", "d", 60*time.Second, "the whole run's budget, split among the phases that run")
	return c
}
