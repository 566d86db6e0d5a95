// Command pyobs observes a running Python process from the outside.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/remoteexec"
	"github.com/pyobs/pyobs/internal/session"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes (README "Exit status").
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitNoTarget   = 3 // no such pid, zombie, kernel thread, exited mid-read
	exitPermission = 4
	exitNotPython  = 5 // not Python, a version pyobs does not support, or no interpreter (before init, after finalise)
)

// global flags shared by every command (DESIGN.md CLI contract).
type globals struct {
	pid        int
	pids       []int // -p given more than once (or as a list): the others
	children   bool
	cgroup     string
	all        bool
	format     string
	output     string
	cpuProfile string // hidden: profile pyobs itself
}

// exitError carries an exit status without an extra message (the spawned command's).
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks bad flags or arguments.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "pyobs",
		Short: "Observe a running Python process from the outside",
		Long: `pyobs observes a running CPython process (3.10–3.15) without its cooperation.
Every command says which price it pays: counting (free), sampling (~1%),
tracing (costly), or introspection (reading the interpreter's memory).

-- CMD ARGS spawns CMD with pyobs's stdin and stderr; its stdout is pyobs's
too unless pyobs writes its own output there (no -o FILE): then the program's
stdout goes to stderr, never into the report or profile.

SIGINT (Ctrl-C) or SIGTERM ends the observation: the command writes its
output as at the end of its window. A program pyobs spawned with -- CMD is
given the same signal (a Ctrl-C at the terminal reached it already: not
sent twice), SIGKILL 5 s later if it still runs, and pyobs exits with its
status (130 or 143 when the signal ended it). A process given with -p is
left running (exit 0). dump -- CMD interrupted before its --after: one
line, the program ended, exit 128+signal.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.VarP(session.PidFlag(&g.pid, &g.pids), "pid", "p", "target process `PID`; repeat or list (-p 1,2) to observe several (or give -- CMD ARGS to spawn one)")
	pf.BoolVar(&g.children, "children", false, "also observe every process the targets fork or spawn, from its first instruction (default for -- CMD where the command observes sets)")
	pf.StringVar(&g.cgroup, "cgroup", "", "observe every process of this cgroup v2 `DIR` (a container, a systemd unit; one must be in it at the start), those entering it later too")
	pf.BoolVar(&g.all, "all", false, "observe every CPython process this user may read")
	pf.StringVar(&g.format, "format", "", "output format (per command; see its help)")
	pf.StringVarP(&g.output, "output", "o", "", "write the output to this file (atomically) instead of stdout; its directory must exist and be writable (checked first)")
	pf.StringVar(&g.cpuProfile, "cpuprofile", "", "write pyobs's own CPU profile here (for pyobs developers)")
	_ = pf.MarkHidden("cpuprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		// Before any command attaches or spawns: an -o it could not write
		// would otherwise fail only after the whole window.
		if err := output.Check(g.output); err != nil {
			return usageError{err}
		}
		if g.cpuProfile == "" {
			return nil
		}
		f, err := os.Create(g.cpuProfile)
		if err != nil {
			return err
		}
		return pprof.StartCPUProfile(f)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) { pprof.StopCPUProfile() }
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{session.FlagError(err)} })
	root.AddCommand(newDump(g), newRecord(g), newStat(g), newOffcpu(g), newTrace(g), newRed(g), newDiagnose(g))
	root.AddCommand(newTop(g), newDiff(g), newAgent(g), newExec(g), newMem(g))
	return root
}

func main() {
	// A command held before its exec (session.Spec.Hold) is this program
	// started again: it waits for its release and execs the command.
	session.HoldMain()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// SIGINT or SIGTERM: the command writes what it has, and a program it
	// spawned is given the same signal (session.NotifyInterrupt).
	ctx, stop := session.NotifyInterrupt(context.Background())
	defer stop()
	var g globals
	root := newRoot(&g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var es exitStatus
	if errors.As(err, &es) {
		return es.code
	}
	fmt.Fprintln(os.Stderr, "pyobs: "+oneLine(err.Error()))
	return exitCode(err)
}

func exitCode(err error) int {
	var ue usageError
	var ge *session.GateError
	var ve *session.UnsupportedVersionError
	var ee *session.EndedError
	var xe *session.ExecError
	var ie *session.InterruptedError
	switch {
	case errors.As(err, &ie):
		return ie.ExitCode()
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &xe):
		return xe.Code()
	case errors.As(err, &ue), errors.As(err, new(*session.ThreadError)), errors.Is(err, session.ErrNotCgroup):
		return exitUsage
	case errors.As(err, &ge):
		return exitPermission
	case errors.Is(err, session.ErrNoProcess), errors.Is(err, session.ErrZombie),
		errors.Is(err, session.ErrKernelThread), errors.Is(err, session.ErrExited), errors.Is(err, session.ErrReplaced):
		return exitNoTarget
	case errors.Is(err, session.ErrNotPython), errors.As(err, &ve), errors.Is(err, pyframes.ErrNoInterpreter),
		errors.Is(err, remoteexec.ErrUnsupported): // exec, mem's tracemalloc: before 3.14, or a build without it
		return exitNotPython
	case isUnknownCommand(err):
		return exitUsage
	}
	return exitError
}

func isUnknownCommand(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command ") || strings.HasPrefix(s, "unknown flag: -") || strings.HasPrefix(s, "unknown shorthand")
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// targetSpec turns -p PID or `-- CMD ARGS` into what the session opens
// (the Python the command needs is the session's default: required).
func targetSpec(cmd *cobra.Command, g *globals, args []string) (session.Spec, error) {
	dash := cmd.ArgsLenAtDash()
	var argv []string
	if dash >= 0 {
		if dash > 0 {
			return session.Spec{}, usagef("unexpected arguments before --: %q", args[:dash])
		}
		argv = args[dash:]
	} else if len(args) > 0 {
		return session.Spec{}, usagef("unexpected arguments %q (to spawn a command, put it after --)", args)
	}
	set := session.SetSpec{Pids: g.pids, Children: g.children, Cgroup: g.cgroup, All: g.all}
	switch {
	case g.pid != 0 && len(argv) > 0:
		return session.Spec{}, usagef("give either -p PID or -- CMD ARGS, not both")
	case g.pid < 0:
		return session.Spec{}, usagef("invalid pid %d", g.pid)
	case g.all && (g.pid != 0 || len(argv) > 0 || g.cgroup != ""):
		return session.Spec{}, usagef("--all takes every Python process: give no -p, --cgroup or -- CMD with it")
	case g.cgroup != "" && len(argv) > 0:
		return session.Spec{}, usagef("give either --cgroup or -- CMD ARGS, not both")
	case g.pid == 0 && len(argv) == 0 && g.cgroup == "" && !g.all:
		return session.Spec{}, usagef("no target: give -p PID or -- CMD ARGS")
	}
	if len(argv) > 0 && setCommands[cmd.Name()] && !cmd.Flags().Changed("children") {
		set.Children = true // -- CMD: its children are part of what it does
	}
	if set.Many() && !setCommands[cmd.Name()] {
		return session.Spec{}, usagef("%s observes one process for now: several -p, --children, --cgroup and --all are for %s", cmd.Name(), setCommandList())
	}
	spec := session.Spec{Pid: g.pid, Argv: argv, Set: set}
	if len(argv) > 0 {
		// A command that cannot run is said before anything loads: one
		// line, status 127 (not found) or 126 (not executable).
		if err := session.CheckCommand(argv[0]); err != nil {
			return session.Spec{}, err
		}
		spec.Stdout = programStdout(g)
	}
	return spec, nil
}

// setAsked says whether the user asked for a set (several -p, --cgroup,
// --all, or --children given explicitly), not only -- CMD's implicit
// --children.
func setAsked(cmd *cobra.Command, g *globals) bool {
	return len(g.pids) > 0 || g.cgroup != "" || g.all || (g.children && cmd.Flags().Changed("children"))
}

// oneProcess refuses a set for the commands that do not parse a target
// with targetSpec.
func oneProcess(cmd *cobra.Command, g *globals) error {
	if len(g.pids) > 0 || g.children || g.cgroup != "" || g.all {
		return usagef("%s observes one process: several -p, --children, --cgroup and --all are for %s", cmd.Name(), setCommandList())
	}
	return nil
}

// setCommands are the commands whose engines observe a set of processes
// (session.SetSpec); the others refuse several -p, --children, --cgroup
// and --all in one line.
var setCommands = map[string]bool{
	"agent":  true,
	"dump":   true,
	"offcpu": true,
	"record": true,
	"red":    true,
	"stat":   true,
	"trace":  true,
}

func setCommandList() string {
	var names []string
	for n := range setCommands {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "no command yet"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// openTarget opens the command line's target: what the command needs of
// its Python decides whether -p must be Python and whether a spawned
// program is waited for until it runs Python code.
func openTarget(cmd *cobra.Command, g *globals, args []string, need session.NeedPython) (*session.Session, error) {
	spec, err := targetSpec(cmd, g, args)
	if err != nil {
		return nil, err
	}
	spec.Python = need
	return session.Open(cmd.Context(), spec)
}

// programStdout is where a spawned program's stdout goes: when pyobs's
// own output is on stdout, to stderr — never into the report or profile
// (README, --help; no line says it: an error stays one line).
func programStdout(g *globals) *os.File {
	if g.output != "" && g.output != "-" {
		return nil // the caller's stdout
	}
	return os.Stderr
}

// finish lets a spawned program run to its end and passes its status on.
func finish(ctx context.Context, s *session.Session) error {
	if code := s.Finish(ctx, session.Wait); code != 0 {
		return exitStatus{code}
	}
	return nil
}

// execFailed is err, or, when a held command could not be executed
// (session.ExecError), its one line on stderr and status 127 (no such
// command) or 126 (not executable).
func execFailed(err error) error {
	var xe *session.ExecError
	if errors.As(err, &xe) {
		fmt.Fprintln(os.Stderr, "pyobs: "+oneLine(xe.Error()))
		return exitStatus{xe.Code()}
	}
	return err
}

// abort ends a spawned program on an error path (or dump --kill); its
// status is not pyobs's.
func abort(s *session.Session) { s.Finish(context.Background(), session.Kill) }

// writeJSON writes v indented, as every command's JSON output is.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
