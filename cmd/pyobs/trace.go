package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/trace"
)

// The seccomp helper of a spawned trace (-e with -- CMD) is this program
// re-executed: it installs the filter and execs CMD before anything else.
func init() { trace.SeccompExec() }

type traceFlags struct {
	duration time.Duration
	engine   string
	events   string
	slow     time.Duration
	log      bool
	sites    int
	kwalk    bool
}

func newTrace(g *globals) *cobra.Command {
	var f traceFlags
	c := &cobra.Command{
		Use:   "trace (-p PID | -- CMD ARGS)",
		Short: "Count and time a process's syscalls, with the Python line of slow or failing ones (tracing: costly)",
		Long: `trace reports every syscall of the target: calls, errors by errno, total time,
p50/p99/max latency, share of wall time, and the Python call sites of the calls
that were slower than --slow or failed.

Engines:
  tracepoint  eBPF programs on the raw tracepoints sys_enter/sys_exit count
              the target's calls in the kernel (counts, errors by errno,
              log-linear latency histograms); only summaries and one event
              per slow or failing call reach pyobs. Nothing is stopped: the
              price is a fraction of a microsecond of kernel time per call.
              The whole Python stack is walked by the BPF program while
              the thread is still in the kernel (exact; --sites ranks the
              whole call paths, root → call); where the kernel refuses the
              walk (or --kernel-walk=false) the innermost frame alone is
              read, and the footer says which; for a thread it does not know yet
              pyobs reads the stack after the call returned and counts it as
              a late read, never as a site. -e filters in the kernel. No
              arguments in --log. Calls still blocked at the end are
              listed with the line they block at.
  ptrace      stops every thread twice per syscall (PTRACE_SEIZE +
              PTRACE_SYSCALL, never PTRACE_ATTACH; a stop makes a blocked
              epoll_wait return EINTR: README Safety): exact arguments, but
              a syscall-heavy program runs 10-70x slower. Sites: exit stop.
--engine auto uses tracepoint when the BPF programs load (root, or
CAP_BPF+CAP_PERFMON), else ptrace, and says why on stderr. Slow or failing
calls whose site was not found are counted as "unattributed"; the others
(fast and successful) get no site by design and are counted apart. A -p
process that is not Python is traced all the same, its calls without
Python sites (the footer says why). New threads are followed. A target
stopped by someone else during the trace (SIGSTOP, Ctrl-Z) makes no calls:
a line under the table's header and the footer say for how long
(tracepoint: its threads' states looked at every 100 ms; ptrace: the group
stops it kept); the footer's "pyobs stopped the target" is pyobs's own.

With -- CMD ARGS, pyobs holds CMD before its exec while the eBPF programs
load and attach (that one-time cost is reported apart: CMD has not
started), then lets it run: CMD is traced from its first instruction, and
every process it forks or spawns joins at its fork (--children, the
default for -- CMD). pyobs exits with CMD's status (127 when there is no
such CMD, 126 when it cannot be executed; if pyobs dies while holding it,
CMD does not run). Several -p,
-p PID --children, --cgroup DIR and --all trace a set too. A set's table
sums its processes; a per-process table and the set's account (seen,
joined late, exited, refused) follow. Each process's slow or failing
calls are named by their whole Python path, walked in the kernel with the
target's layout (a held command's read from its files before its exec;
when they name no interpreter, a shell wrapper or pyenv's shim, taken
from the first of its processes to be Python, the one it execs or a
child: a longer load while it is held); a process of another CPython
build is counted without sites, and so are a held command's calls before
its interpreter is up (calls_before_walk).

--engine ptrace follows one process (the set's others are not traced, and
it says so). With -- CMD it starts CMD under trace from its first
instruction (it must be the tracer's child). With -e as well, CMD starts
with a seccomp filter (pyobs re-executes itself to install it, then execs
CMD) so only the listed calls stop; the rest run at full speed. CMD keeps
no_new_privs, and a filter cannot be removed: the processes CMD starts
have it too, so pyobs follows them only to pass their stops through (their
calls are not traced); if the trace ends first pyobs stays attached,
counting nothing, until CMD and they end; if pyobs is killed, their listed
calls fail with ENOSYS.`,
		Example: `  pyobs trace -p 4242 -d 10s
  pyobs trace -p 4242 --format json
  pyobs trace -p 4242 -e openat,newfstatat --log
  pyobs trace -p 4242 --slow 10ms --log
  pyobs trace -p 4242 --engine ptrace --log -e openat
  pyobs trace -- python3 app.py
  pyobs trace -p 4242 --children -d 10s
  pyobs trace --engine ptrace -e openat,connect -- python3 app.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runTrace(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to trace (0: until Ctrl-C, or the spawned command's end; -p PID, tracepoint engine: it ends at the target's exec, exit 3)")
	fl.StringVar(&f.engine, "engine", "auto", "auto, tracepoint (eBPF) or ptrace")
	fl.StringVarP(&f.events, "expr", "e", "", "only these syscalls, comma-separated (e.g. openat,newfstatat)")
	fl.DurationVar(&f.slow, "slow", time.Millisecond, "read the Python site of calls at least this slow (and of failing calls); with --log, log only these")
	fl.BoolVar(&f.log, "log", false, "print one line per matching call: tid, duration, syscall(args) = result, Python site")
	fl.IntVar(&f.sites, "sites", 3, "top Python call paths (tracepoint engine: whole stacks walked in the kernel) or sites per syscall")
	fl.BoolVar(&f.kwalk, "kernel-walk", true, "tracepoint: walk the whole Python stack of slow or failing calls in the kernel (false: the innermost frame only)")
	return c
}

func runTrace(cmd *cobra.Command, g *globals, f *traceFlags, args []string) error {
	format, err := textFormat("trace", g, "text")
	if err != nil {
		return err
	}
	opt := trace.Options{Engine: f.engine, Duration: f.duration, Syscalls: f.events, Slow: f.slow,
		SlowSet: cmd.Flags().Changed("slow"), Sites: f.sites, NoKernelWalk: !f.kwalk, OnEngine: func(a trace.Account) {
			if a.Fallback != "" {
				fmt.Fprintf(os.Stderr, "pyobs trace: eBPF engine not available (%s): using ptrace, which stops every thread twice per syscall\n", a.Fallback)
			}
		}}
	if err := opt.Validate(); err != nil {
		return usageError{err}
	}
	if cmd.Flags().Changed("expr") && strings.TrimSpace(f.events) == "" {
		// -e "" (an unset shell variable) would trace every call.
		return usagef("trace: -e names no syscall: give names (-e openat,read), or drop -e to trace every call")
	}
	if f.log && format == "json" {
		return usagef("trace: --log writes text lines, not JSON (--format json, or -o FILE.json): give --format text")
	}
	// -- CMD is held before its exec while the eBPF programs load and
	// attach, then released: counted from its first instruction, its
	// children from theirs. With --engine ptrace (or when eBPF is refused)
	// it is started by the tracer itself (it must be the tracer's own
	// child: a second waiter in pyobs would steal its ptrace stops) and
	// handed to a session afterwards (Adopt); -p PID is opened as usual.
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return err
	}
	if len(spec.Argv) == 0 && !spec.Set.Many() {
		// A process that is not Python still makes calls: counted,
		// without Python sites (the account says why).
		spec.Python = session.PythonOptional
	}
	var s *session.Session
	if len(spec.Argv) > 0 {
		opt.Argv, opt.ProgramStdout, opt.SetAsked = spec.Argv, spec.Stdout, spec.Set.Many()
		if f.engine != "ptrace" {
			spec.Hold = true
			if s, err = session.Open(cmd.Context(), spec); err != nil {
				return err
			}
		}
	} else if s, err = session.Open(cmd.Context(), spec); err != nil {
		return err
	}
	if f.engine == "ptrace" && spec.Set.Many() {
		fmt.Fprintf(os.Stderr, "pyobs trace: the ptrace engine traces one process; the set's other processes and children are not traced (--engine auto or tracepoint follows them)\n")
	}
	where, toFile := output.Where(g.output), output.ToFile(g.output)
	var log *trace.LogSink // --log lines: to stdout as they come, or before the summary in -o FILE
	if f.log {
		var err error
		if log, err = trace.NewLogSink(os.Stdout, toFile); err != nil {
			return err
		}
		defer log.Close()
		opt.Log = log
	}
	res, err := trace.Run(cmd.Context(), s, opt)
	if err != nil {
		if s != nil && s.Spawned() {
			abort(s) // a held command that never ran is let go unrun
		}
		return execFailed(err)
	}
	if log != nil {
		_ = log.Flush()
	}
	werr := output.Write(g.output, 0o644, func(w io.Writer) error { return trace.Write(w, format, res, log) })
	if werr == nil {
		fmt.Fprintln(os.Stderr, res.Footer(where))
	}
	if a := res.Account; a.StillAttached != nil {
		// A seccomp-filtered command needs its tracer until it ends (its
		// filtered calls fail with ENOSYS without one): whatever went wrong
		// here is said after it ended.
		ferr := finish(cmd.Context(), session.AdoptWaiting(a.Pid, a.StillAttached, a.SignalAttached))
		if werr != nil {
			return werr
		}
		if a.DetachError != nil {
			return fmt.Errorf("trace: %w", a.DetachError)
		}
		return ferr
	}
	if werr != nil {
		return werr
	}
	if res.Account.DetachError != nil {
		return fmt.Errorf("trace: %w (the kernel detaches the rest when pyobs exits)", res.Account.DetachError)
	}
	if res.Account.Execed != nil {
		return res.Account.Execed // -p PID exec'd: said, status 3
	}
	if a := res.Account; a.Spawned {
		// The window is over, not CMD's life: it runs to its end (SIGINT,
		// SIGTERM: passed on to it, SIGKILL after Grace) and its status is pyobs's.
		return finish(cmd.Context(), session.Adopt(a.Pid, a.TargetExited, a.ExitCode))
	}
	if s != nil && s.Spawned() {
		return finish(cmd.Context(), s) // the held command, traced with eBPF
	}
	return nil
}
