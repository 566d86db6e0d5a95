package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/remoteexec"
	"github.com/pyobs/pyobs/internal/session"
)

type execFlags struct {
	code    string
	tid     int
	timeout time.Duration
	nudge   bool
	nudgeSg string
	any     bool
}

func newExec(g *globals) *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "exec -p PID (SCRIPT.py | -c CODE)",
		Short: "Run a Python script inside a running CPython 3.14+ (PEP 768: cooperation, no ptrace)",
		Long: `exec asks the target's interpreter to run a script at its next safe point,
through CPython 3.14's remote-debugging protocol (PEP 768), and prints what
the script printed.

Price: cooperation. pyobs writes the request into the chosen thread's
state (process_vm_writev: the script path, the pending flag, the eval-breaker
bit); that thread runs the script between two bytecodes, holding the GIL.
Nothing is stopped and nothing is ptrace-attached. The script runs in fresh
globals; its sys.stdout/sys.stderr writes (from its own thread) come back
to pyobs's stdout; an exception is printed to stderr and pyobs exits 1, the
target goes on. The script file lives in a directory of the target's /tmp
that only the target's user can enter and is removed when the script starts.

Cannot: run before 3.14, in a target started with -X disable-remote-debug or
PYTHON_DISABLE_REMOTE_DEBUG, or built --without-remote-debug (refused). A
thread blocked in a syscall or in C code runs nothing until it returns to the
eval loop: after --timeout the request is withdrawn with what the thread is
blocked in and which Python threads run (--tid). --any-thread moves the
request by itself, after a moment, to a Python thread that is running. --nudge then sends it a signal the target catches (SIGWINCH,
SIGURG, SIGCHLD or SIGCONT: conventionally harmless) to interrupt the syscall;
CPython itself catches only SIGINT (KeyboardInterrupt), so a target without
such a handler is refused unless --nudge-signal names one. --nudge-signal
must name a signal the target catches (SigCgt in /proc/PID/status), so
that its handler runs: SIGKILL and SIGSTOP are refused, and so is a signal
it does not catch (its default action would end or stop the target, or
interrupt nothing), with exit 2 before any request is made.`,
		Example: `  pyobs exec -p 4242 report.py
  pyobs exec -p 4242 -c 'import threading; print(threading.enumerate())'
  pyobs exec -p 4242 --tid 4250 --timeout 2s report.py
  pyobs exec -p 4242 --nudge report.py
  pyobs exec -p 4242 --any-thread report.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runExec(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.StringVarP(&f.code, "code", "c", "", "run this source instead of a script file")
	fl.IntVar(&f.tid, "tid", 0, "the thread that runs the script (native thread id; default: the main thread)")
	fl.BoolVar(&f.any, "any-thread", false, "when the main thread does not take the request at once, move it to a Python thread that is running")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long the thread may take to reach a safe point")
	fl.BoolVar(&f.nudge, "nudge", false, "when the thread has not started the script after a moment, send it a signal it catches to interrupt a blocking syscall")
	fl.StringVar(&f.nudgeSg, "nudge-signal", "", "with --nudge: the signal to send (name or number) instead of one pyobs picks; one the target catches (never KILL or STOP)")
	return c
}

func runExec(cmd *cobra.Command, g *globals, f *execFlags, args []string) error {
	if err := oneProcess(cmd, g); err != nil {
		return err
	}
	if g.format != "" && g.format != "text" {
		return usagef("exec: unknown --format %q (text)", g.format)
	}
	if cmd.ArgsLenAtDash() >= 0 {
		return usagef("exec: needs a running process (-p PID), not a command")
	}
	opt := remoteexec.Options{Tid: f.tid, Timeout: f.timeout, Nudge: f.nudge, AnyThread: f.any}
	if f.any && f.tid != 0 {
		return usagef("exec: give either --tid or --any-thread")
	}
	switch {
	case f.code != "" && len(args) > 0:
		return usagef("exec: give either SCRIPT.py or -c CODE, not both")
	case f.code != "":
		opt.Source, opt.Name = []byte(f.code), "<pyobs exec -c>"
	case len(args) == 1:
		b, err := os.ReadFile(args[0])
		if err != nil {
			return usagef("exec: can't read %s: %v", args[0], err)
		}
		opt.Source, opt.Name = b, args[0]
	case len(args) == 0:
		return usagef("exec: give a script (SCRIPT.py) or -c CODE")
	default:
		return usagef("exec: one script only, got %q", args)
	}
	if f.timeout <= 0 {
		return usagef("exec: --timeout must be positive")
	}
	if f.tid < 0 {
		return usagef("exec: invalid --tid %d", f.tid)
	}
	if f.nudgeSg != "" {
		if !f.nudge {
			return usagef("exec: --nudge-signal needs --nudge")
		}
		sg, err := parseSignal(f.nudgeSg)
		if err != nil {
			return usageError{err}
		}
		opt.NudgeSignal = sg
	}
	if g.pid == 0 {
		return usagef("exec: no target: give -p PID")
	}
	s, err := session.Open(cmd.Context(), session.Spec{Pid: g.pid})
	if err != nil {
		return err
	}
	if opt.NudgeSignal != 0 {
		// Checked before the request is made: a signal the target does
		// not catch would end it (TERM, HUP, USR1…) or do nothing.
		if err := remoteexec.CheckNudgeSignal(s.FS, s.Pid, opt.NudgeSignal); err != nil {
			return usagef("exec: --nudge-signal: %w", err)
		}
	}
	ch, err := remoteexec.Open(s)
	if err != nil {
		return err
	}
	defer ch.Close()
	res, err := ch.Run(cmd.Context(), opt)
	if err != nil {
		return err
	}
	// The target's data: a file gets 0600.
	if err := output.Write(g.output, 0o600, func(w io.Writer) error { _, err := w.Write(res.Output); return err }); err != nil {
		return err
	}
	if res.Nudged != "" {
		fmt.Fprintf(os.Stderr, "pyobs exec: sent %s to thread %d to bring it to a safe point\n", res.Nudged, res.Tid)
	}
	if res.Exception != "" {
		fmt.Fprint(os.Stderr, res.Traceback)
		return fmt.Errorf("exec: the script raised %s in pid %d thread %d (the target goes on)", output.Printable(res.Exception), s.Pid, res.Tid)
	}
	return nil
}

// parseSignal reads SIGWINCH, WINCH or 28.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("exec: invalid signal number %d", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sg := unix.SignalNum(name); sg != 0 {
		return sg, nil
	}
	return 0, fmt.Errorf("exec: unknown signal %q", s)
}
