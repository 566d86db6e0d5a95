package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/session"
)

type dumpFlags struct {
	locals bool
	lock   bool
	native bool
	after  time.Duration
	kill   bool
}

func newDump(g *globals) *cobra.Command {
	var f dumpFlags
	c := &cobra.Command{
		Use:   "dump (-p PID | -- CMD ARGS)",
		Short: "Print every thread's Python stack now (introspection: reads memory, stops nothing)",
		Long: `dump reads every thread's Python stack from the target's memory.

Price: introspection. By default the target is not stopped: each stack is read
while the thread runs, validated, and re-read if it changed underneath
(reported per thread as consistent or not). --lock stops all threads with
PTRACE_SEIZE+INTERRUPT for a frozen snapshot and resumes them at once.
Cannot see: native (C) frames, and anything between two reads.

With -- CMD ARGS, pyobs starts CMD, dumps once its interpreter runs Python
code and --after has passed, then lets it run to its end (or --kill).`,
		Example: `  pyobs dump -p 4242
  pyobs dump -p 4242 --format json
  pyobs dump --locals -p 4242
  pyobs dump --after 2s -- python3 app.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runDump(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.BoolVar(&f.locals, "locals", false, "include simple local variables (None/bool/int/float/str/bytes; len of containers); output file is created 0600")
	fl.BoolVar(&f.lock, "lock", false, "stop the threads (PTRACE_SEIZE+INTERRUPT) while reading, for a consistent snapshot")
	fl.BoolVar(&f.native, "native", false, "include native frames (not available yet)")
	fl.DurationVar(&f.after, "after", time.Second, "with -- CMD: how long to let the program run after its first Python frame before dumping")
	fl.BoolVar(&f.kill, "kill", false, "with -- CMD: end the program after the dump instead of waiting for it")
	return c
}

func runDump(cmd *cobra.Command, g *globals, f *dumpFlags, args []string) error {
	format := g.format
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" {
		return usagef("dump: unknown --format %q (text, json)", format)
	}
	if f.native {
		return usagef("dump: --native is not available yet")
	}
	if f.after < 0 {
		return usagef("dump: --after must not be negative")
	}
	s, err := target(cmd, g, args)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if s.Spawned() {
		defer func() {
			if f.kill {
				s.Kill(2 * time.Second)
			}
		}()
		if err := s.WaitPython(ctx, f.after); err != nil {
			s.Kill(2 * time.Second)
			return err
		}
	}
	d, err := s.Dump(session.DumpOptions{Locals: f.locals, Lock: f.lock})
	if err != nil {
		if s.Spawned() {
			s.Kill(2 * time.Second)
		}
		return err
	}
	mode := os.FileMode(0o644)
	if f.locals {
		mode = 0o600 // locals can hold secrets
	}
	err = writeOutput(g.output, mode, func(w io.Writer) error {
		if format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(d)
		}
		return writeDumpText(w, d)
	})
	if err != nil {
		return err
	}
	if s.Spawned() && !f.kill {
		return waitSpawned(ctx, s)
	}
	return nil
}

// waitSpawned lets a spawned target run to its end and passes on its status.
func waitSpawned(ctx context.Context, s *session.Session) error {
	select {
	case <-s.Exited():
	case <-ctx.Done():
		// Ctrl-C reached the whole foreground group; give the target its chance to finish.
		select {
		case <-s.Exited():
		case <-time.After(5 * time.Second):
			s.Kill(2 * time.Second)
		}
	}
	if code := s.ExitCode(); code != 0 {
		return exitStatus{code}
	}
	return nil
}

func writeDumpText(w io.Writer, d *session.Dump) error {
	how := "read without stopping the target"
	if d.Read.Method == "ptrace-stopped" {
		how = fmt.Sprintf("read with the target stopped for %.0f µs", d.Read.StoppedUS)
	}
	fmt.Fprintf(w, "Process %d: Python %s (%s), %d threads, %s in %.0f µs\n",
		d.Pid, d.Python.Version, d.Python.Binary, len(d.Threads), how, d.Read.DurationUS)
	if d.Read.TornRetries > 0 || d.Read.Torn > 0 {
		fmt.Fprintf(w, "  torn reads: %d retried, %d threads still inconsistent\n", d.Read.TornRetries, d.Read.Torn)
	}
	for _, t := range d.Threads {
		fmt.Fprintln(w)
		name := fmt.Sprintf("%q", t.Name)
		if t.Name == "" {
			name = "(no threading name)"
			if t.Tid == d.Pid {
				name = "(main thread, no threading name)"
			}
		}
		tid := "?"
		if t.Tid > 0 {
			tid = fmt.Sprint(t.Tid)
		}
		var tags []string
		if t.HoldsGIL {
			tags = append(tags, "[holds GIL]")
		}
		if t.State != "" {
			tags = append(tags, t.State)
		}
		fmt.Fprintf(w, "Thread %s %s (thread_id 0x%x) %s\n", tid, name, t.ThreadID, strings.Join(tags, " "))
		if !t.Consistent {
			fmt.Fprintf(w, "  (inconsistent read: %s)\n", t.Error)
		}
		if len(t.Frames) == 0 {
			fmt.Fprintln(w, "  (no Python frames)")
			continue
		}
		for i := len(t.Frames) - 1; i >= 0; i-- {
			fr := t.Frames[i]
			fmt.Fprintf(w, "  File \"%s\", line %d, in %s\n", fr.File, fr.Line, fr.Function)
			for _, l := range fr.Locals {
				v := l.Value
				if v == "" {
					v = "<" + l.Type + ">"
				} else {
					v += " (" + l.Type + ")"
				}
				fmt.Fprintf(w, "      %s = %s\n", l.Name, v)
			}
		}
	}
	return nil
}
