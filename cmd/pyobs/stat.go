package main

import (
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/stat"
)

type statFlags struct {
	dur      time.Duration
	interval time.Duration
	poll     time.Duration
	noPerf   bool
}

func newStat(g *globals) *cobra.Command {
	var f statFlags
	c := &cobra.Command{
		Use:   "stat (-p PID | -- CMD ARGS)",
		Short: "Count what the kernel already counts, over a window, and say on-CPU or off-CPU (counting: free)",
		Long: `stat measures one process and each of its threads over a window (-d, 1 s by
default): CPU time and utilization in cores, voluntary and involuntary context
switches, run-queue wait (schedstat), memory (RSS, PSS split from
smaps_rollup, high-water mark, faults), I/O (syscall bytes vs block-layer
bytes, fds vs RLIMIT_NOFILE), the cgroup's CPU throttling and quota (v1 or v2),
pressure stall information, and perf counters (software and, where the
machine has a PMU, hardware events, opened as groups and scaled when
multiplexed). It ends with verdicts: stopped, on-cpu, off-cpu, cpu-throttled,
runqueue-saturated, cpu-contention, blocking, blocking-io, major-faults,
memory-pressure, fd-pressure, gil-bound, multiplexed — each with the numbers
that triggered it, the threshold, and the next command to run. A target
stopped by someone else (SIGSTOP, Ctrl-Z, a tracer; its threads' states
looked at every 100 ms) gets the verdict stopped, with how long and which
share of the window; on-cpu or off-cpu is then judged over the time it ran.

Price: counting — file reads from /proc and /sys, and perf counters the
kernel saves on each context switch. Nothing is stopped.
Cannot see: where time goes (no stacks: use record/offcpu for that); states
are polled (every --poll), so a short block between polls is not seen.

-i INTERVAL: live mode, one report per interval until Ctrl-C (or -d when
given): a refreshed table on a terminal, a JSON line per interval otherwise.
-- CMD ARGS: starts CMD and reports whole-run counters when it exits (CPU,
faults and switches from wait4, like time -v), then exits with its status.
The target need not be Python; Python thread names are shown when it is.

A set (-p A,B; --children; --cgroup DIR; --all; -- CMD --children) adds a
line per process (CPU, RSS, threads, switches, faults, when it joined or
exited) to the report of the set as one, whose verdicts are the set's.
Members are polled every --poll: a child that lives less than that is
missed. No perf counters on a set; with -i each report covers its interval.`,
		Example: `  pyobs stat -p 4242
  pyobs stat -p 4242 -d 10s --format json
  pyobs stat -p 4242 -i 1s
  pyobs stat -- python3 job.py
  pyobs stat -p 4242 --children -d 5s`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runStat(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.dur, "duration", "d", time.Second, "window length (with -i: stop after this long; default: until Ctrl-C)")
	fl.DurationVarP(&f.interval, "interval", "i", 0, "live mode: report every INTERVAL")
	fl.DurationVar(&f.poll, "poll", 200*time.Millisecond, "how often thread states are polled inside a window")
	fl.BoolVar(&f.noPerf, "no-perf", false, "do not open perf counters")
	return c
}

func runStat(cmd *cobra.Command, g *globals, f *statFlags, args []string) error {
	format, err := textFormat("stat", g, "")
	if err != nil {
		return err
	}
	opt := stat.Options{Duration: f.dur, Interval: f.interval, Poll: f.poll, NoPerf: f.noPerf, Started: time.Now()}
	if err := opt.Validate(cmd.Flags().Changed("duration")); err != nil {
		return usageError{err}
	}
	// A set the user asked for gets a line per process; -- CMD alone
	// keeps the one-process report (wait4's totals count the children
	// it waited for).
	explicitSet := setAsked(cmd, g)
	ctx := cmd.Context()
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	spec.Python = session.PythonOptional
	if len(spec.Argv) > 0 && (cmd.Flags().Changed("duration") || cmd.Flags().Changed("interval")) {
		// Its report is the whole run's, from wait4: a window would be
		// silently ignored.
		return usagef("stat: -d and -i do not apply to -- CMD (its report is the whole run, as time -v's): drop them, or start the program yourself and attach with -p")
	}
	if !explicitSet {
		spec.Set = session.SetSpec{}
	}
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	if explicitSet && f.interval > 0 && !s.Spawned() {
		if !cmd.Flags().Changed("duration") {
			opt.Duration = 0 // until Ctrl-C
		}
		out, format, err := liveOutput(g, format)
		if err != nil {
			return err
		}
		defer out.Close()
		err = stat.StreamSet(ctx, s, opt, func(r *stat.SetStat) error {
			return interval(out, format, func(w io.Writer) error { return json.NewEncoder(w).Encode(r) },
				func(w io.Writer) error { return stat.WriteSetText(w, r) })
		})
		if errors.Is(err, unix.EPIPE) {
			return nil
		}
		if err != nil {
			abort(s)
		}
		return err
	}
	if explicitSet {
		s.EndOnInterrupt(ctx)
		res, err := stat.RunSet(ctx, s, opt)
		if err != nil {
			abort(s) // a spawned command is not left behind
			return err
		}
		err = output.Write(g.output, 0o644, func(w io.Writer) error {
			if format == "json" {
				return writeJSON(w, res)
			}
			return stat.WriteSetText(w, res)
		})
		if err != nil {
			return err
		}
		if res.ExitCode != nil && *res.ExitCode != 0 {
			return exitStatus{*res.ExitCode}
		}
		return nil
	}
	if f.interval > 0 && !s.Spawned() {
		if !cmd.Flags().Changed("duration") {
			opt.Duration = 0 // until Ctrl-C
		}
		out, format, err := liveOutput(g, format)
		if err != nil {
			return err
		}
		defer out.Close()
		err = stat.Stream(ctx, s, opt, func(r *stat.Result) error {
			return interval(out, format, func(w io.Writer) error { return report.WriteStatJSON(w, r.Stat, false) },
				func(w io.Writer) error { return report.WriteStatText(w, r.Stat) })
		})
		if errors.Is(err, unix.EPIPE) {
			return nil
		}
		return err
	}
	// A spawned program is measured to its end (the report covers its
	// whole run); SIGINT or SIGTERM is passed on to it (EndOnInterrupt).
	s.EndOnInterrupt(ctx)
	res, err := stat.Run(ctx, s, opt)
	if err != nil {
		return err
	}
	if format == "" {
		format = "text"
	}
	if err := writeStat(g.output, format, res.Stat); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return exitStatus{res.ExitCode}
	}
	return nil
}

func writeStat(path, format string, st *report.Stat) error {
	return output.Write(path, 0o644, func(w io.Writer) error {
		if format == "json" {
			return report.WriteStatJSON(w, st, true)
		}
		return report.WriteStatText(w, st)
	})
}
