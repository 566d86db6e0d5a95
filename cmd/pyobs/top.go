package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/top"
)

func newTop(g *globals) *cobra.Command {
	var opt top.Options
	c := &cobra.Command{
		Use:     "top (-p PID | -- CMD ARGS)",
		Short:   "Live view: functions by own and total % of the last second's samples, per thread (sampling: ~1 %)",
		Long:    top.Help,
		Example: "  pyobs top -p 4242\n  pyobs top --mode wall -p 4242\n  pyobs top -p 4242 -d 10s | jq .functions[0]",
		Args:    cobra.ArbitraryArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runTop(cmd, g, &opt, args) },
	}
	fl := c.Flags()
	fl.IntVarP(&opt.Freq, "freq", "F", 99, "samples per second (of CPU time per thread in cpu mode; of wall time otherwise)")
	fl.DurationVarP(&opt.Duration, "duration", "d", 0, "stop after this long (0, the default: until q, Ctrl-C or the target exits)")
	fl.StringVar(&opt.Mode, "mode", "cpu", "cpu, wall or gil")
	fl.StringVar(&opt.Engine, "engine", "auto", "cpu mode: auto, bpf or perf (as record's)")
	return c
}

func runTop(cmd *cobra.Command, g *globals, opt *top.Options, args []string) error {
	switch {
	case g.output != "":
		return usagef("top: -o is not for a live view: on a pipe it writes JSON lines to stdout (redirect them)")
	case g.format != "" && g.format != "json":
		return usagef("top: unknown --format %q (json: JSON lines even on a terminal)", g.format)
	}
	opt.OnFallback = func(l string) { os.Stderr.WriteString("pyobs top: " + l + "\n") }
	if err := opt.Check(); err != nil {
		return usagef("top: %v", err)
	}
	s, err := openTarget(cmd, g, args, session.PythonRequired)
	if err != nil {
		return err
	}
	ctx, quit := context.WithCancel(cmd.Context())
	defer quit()
	screen := g.format == "" && output.IsTerminal(os.Stdout)
	opt.Freq = record.Honour(os.Stderr, "top", opt.Mode, opt.Freq) // capped or said, as record does
	snaps, done := make(chan *top.Snapshot, 1), make(chan error, 1)
	enc := json.NewEncoder(os.Stdout)
	go func() {
		done <- top.Run(ctx, s, *opt, func(sn *top.Snapshot) {
			if !screen {
				_ = enc.Encode(sn) // one line each
				return
			}
			select { // the screen shows the newest
			case <-snaps:
			default:
			}
			snaps <- sn
		})
	}()
	if screen {
		err = topScreen(s.Pid, snaps, done, quit)
	} else {
		err = <-done
	}
	if err != nil {
		abort(s)
		return record.WallHint(err, opt.Mode) // perf refused: --mode wall needs no perf events
	}
	if s.Running() && cmd.Context().Err() == nil {
		// q or -d: a program started with -- ends with the view, said.
		code := s.Finish(context.Background(), session.Kill)
		fmt.Fprintf(os.Stderr, "pyobs top: the view ended while the program (pid %d) was still running: pyobs ended it (exit status %d, not passed on)\n", s.Pid, code)
		return nil
	}
	return finish(cmd.Context(), s)
}

// topScreen draws snapshots and reads keys until the engine ends.
func topScreen(pid int, snaps <-chan *top.Snapshot, done <-chan error, quit func()) error {
	term := top.OpenTerm(os.Stdin, os.Stdout)
	defer term.Close()
	term.Draw([]string{"pyobs top: sampling pid " + strconv.Itoa(pid) + "…"})
	v, last := top.View{Sort: top.ByOwn}, (*top.Snapshot)(nil)
	for {
		select {
		case err := <-done:
			return err
		case sn := <-snaps:
			if v.Paused {
				continue
			}
			last = sn
		case k := <-term.Keys:
			switch k {
			case 'q', 'Q':
				quit()
			case 'p', 'P', ' ':
				v.Paused = !v.Paused
			case top.ByOwn, top.ByTotal, top.ByName:
				v.Sort = k
			case top.PerThread:
				v.PerThread = !v.PerThread
			}
		}
		if last != nil {
			w, h := term.Size()
			term.Draw(top.Screen(last, v, w, h))
		}
	}
}
