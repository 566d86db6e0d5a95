package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/session"
)

type redFlags struct {
	dur      time.Duration
	interval time.Duration
	poll     time.Duration
	slowest  int
	hz       int
	profile  string
}

func newRed(g *globals) *cobra.Command {
	var f redFlags
	c := &cobra.Command{
		Use:   "red (-p PID[,PID…] [--children] | --cgroup DIR | --all | -- CMD ARGS)",
		Short: "Rate, errors and duration of a server, per listening port, from its socket syscalls (eBPF tracepoints: no stops)",
		Long: `red measures a server from outside at the syscall boundary: for each listening
TCP port, requests per second, error rate (5xx, and connections reset or
closed before the response), 4xx rate apart, latency p50/p90/p99/max,
requests in flight, and queue time (accept → first byte read) when the
accept was seen. Requests are HTTP/1.x, read from the first bytes of each
read and write: a request runs from its first byte read to its last byte
written before the next read on the connection (keep-alive and pipelined
requests are split); routes are method + path with plain ids collapsed to
:id (at most 64 per port, then [other]). Other protocols and TLS get
connection-level numbers (connections/s, bytes, duration) and a "not
parsed" note saying why.

--slowest N lists the N slowest requests with method, path, status,
duration and the handling thread's Python stack most often seen while the
request was served: the kernel samples each of the target's threads on
CPU (--sample-hz per CPU, task-clock) and walks its Python stack at the
sample (eBPF), and each sample is joined to the request that thread was
serving at that instant, so a request that ran two sample periods or more
has its handler's stack. A request blocked off CPU (sleep, I/O, a lock) is
not sampled: its thread's stack is also read from user space every --poll
while it is in flight longer than --poll. Without the kernel walk (not
x86_64, BPF refused, no layout for the version) only those reads remain,
and the report says why.

--profile FILE writes one flame graph of the kernel's samples with each
request's route as the root frame ("[route] GET /slow/:id", "[port N]"
when no HTTP route was parsed, "[no request]" for samples outside any
finished request); the format comes from the extension as record's -o
(.svg, .folded, .pb.gz, .speedscope.json, .gecko.json, .json).

A pre-forking server (gunicorn, a parent that binds and forks workers):
-p MASTER --children observes the master and every worker, those running
and those forked later (-- CMD follows children by default; --cgroup DIR
and several -p work too). Each port is reported across the processes: a
listening socket inherited across fork is one port, and a request belongs
to the process that accepted its connection, listed per process (pid,
requests, errors, duration quantiles) under the port, with the account of
processes seen, joined late and exited; an attached set is measured until
-d, or until every process of it has exited. Stacks (--slowest, --profile) are
walked in the kernel for forked workers too (they have the target's
addresses); one that exec'd a new program is counted but not walked.

Price: eBPF programs on the raw_syscalls sys_enter/sys_exit tracepoints
(every syscall of the machine pays a map lookup; the observed processes'
socket calls send one 176-byte event each). Nothing is stopped. Needs
root (CAP_BPF and CAP_PERFMON). x86_64 only.
Cannot see: TLS plaintext, HTTP/2, io_uring; latency spent in the kernel
before the server reads.

-i INTERVAL: live mode, one report per interval until Ctrl-C (or -d when
given): a refreshed table on a terminal, a JSON line per interval otherwise.
-- CMD ARGS: starts CMD (the probe is on before it listens) and measures it
until it exits, then exits with its status; with -d, pyobs ends it (SIGTERM)
when the window ends.`,
		Example: `  pyobs red -p 4242 -d 30s
  pyobs red -p 4242 -d 10s --slowest 5
  pyobs red -p 4242 -d 10s --slowest 5 --profile routes.svg
  pyobs red -p 4242 -i 1s
  pyobs red -p 4242 --format json
  pyobs red -p 4242 --children -d 30s            # a prefork master and its workers
  pyobs red -- python3 -m http.server 8000`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runRed(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.dur, "duration", "d", 10*time.Second, "window length (with -i or -- CMD: stop after this long; default: until Ctrl-C or exit)")
	fl.DurationVarP(&f.interval, "interval", "i", 0, "live mode: report every INTERVAL")
	fl.DurationVar(&f.poll, "poll", 50*time.Millisecond, "how often in-flight requests older than this get their Python stack read")
	fl.IntVar(&f.slowest, "slowest", 0, "list the N slowest requests with their Python stack")
	fl.IntVar(&f.hz, "sample-hz", 199, "kernel stack samples per second per CPU for --slowest and --profile (0: user-space reads only)")
	fl.StringVar(&f.profile, "profile", "", "write a flame graph of the samples, each route a root frame (format by extension)")
	return c
}

func runRed(cmd *cobra.Command, g *globals, f *redFlags, args []string) error {
	format, err := textFormat("red", g, "")
	if err != nil {
		return err
	}
	opt := red.Options{Slowest: f.slowest, Poll: f.poll, Interval: f.interval, Duration: f.dur, SampleHz: f.hz, Profile: f.profile != ""}
	if err := opt.Validate(); err != nil {
		return usageError{err}
	}
	var profFormat string
	if f.profile != "" {
		if profFormat, err = flame.FormatFor(f.profile); err != nil {
			return usageError{fmt.Errorf("red: --profile: %w", err)}
		}
		if f.profile == "-" {
			return usageError{errors.New("red: --profile needs a file name (stdout carries the report)")}
		}
		// Checked before the window, as -o is: else it fails at the end.
		if err := output.Check(f.profile); err != nil {
			return usageError{fmt.Errorf("red: --profile: %w", err)}
		}
	}
	ctx := cmd.Context()
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	spec.Python = session.PythonOptional
	// -- CMD is held before its exec and released once the programs are
	// attached: its requests are counted from its first instruction.
	spec.Hold = len(spec.Argv) > 0
	s, err := session.Open(ctx, spec)
	if err != nil {
		return err
	}
	if (s.Spawned() || f.interval > 0) && !cmd.Flags().Changed("duration") {
		opt.Duration = 0 // until the program ends, or Ctrl-C
	}
	if f.interval > 0 {
		err = redLive(ctx, s, opt, g, format)
	} else {
		var rep *red.Result
		if rep, err = red.Run(ctx, s, opt); err == nil {
			err = output.Write(g.output, 0o644, func(w io.Writer) error {
				if format == "json" {
					return red.WriteJSON(w, rep, true)
				}
				return red.WriteText(w, rep)
			})
			if err == nil && f.profile != "" {
				err = writeRedProfile(f.profile, profFormat, rep)
			}
		}
	}
	if err != nil {
		abort(s)
		return execFailed(err)
	}
	if s.Running() && ctx.Err() == nil && opt.Duration > 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), red.EndedNote(s.Pid, opt.Duration, s.Finish(context.Background(), session.Kill))) // -d ended the measurement: end the command too, and say so
		return nil
	}
	return finish(ctx, s)
}

func redLive(ctx context.Context, s *session.Session, opt red.Options, g *globals, format string) error {
	out, format, err := liveOutput(g, format)
	if err != nil {
		return err
	}
	defer out.Close()
	err = red.Stream(ctx, s, opt, func(r *red.Result) error {
		return interval(out, format, func(w io.Writer) error { return red.WriteJSON(w, r, false) },
			func(w io.Writer) error { return red.WriteText(w, r) })
	})
	if errors.Is(err, unix.EPIPE) {
		return nil
	}
	return err
}

// writeRedProfile writes --profile, or says why there is none.
func writeRedProfile(path, format string, rep *red.Result) error {
	if rep.Profile == nil {
		why := "no kernel samples"
		if rep.Sampling != nil && rep.Sampling.Fallback != "" {
			why = rep.Sampling.Fallback
		}
		return fmt.Errorf("red: can't write --profile %s: the kernel sampler did not run (%s)", path, why)
	}
	title := fmt.Sprintf("pyobs red: pid %d, samples by route", rep.Pid)
	return writeFlame(path, format, rep.Profile, flame.WriteOptions{Title: title})
}
