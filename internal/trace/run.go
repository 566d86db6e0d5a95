package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/fallback"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	tptrace "github.com/pyobs/pyobs/internal/trace/ptrace"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

// Options say what to trace and how.
type Options struct {
	Engine   string        // auto, tracepoint (eBPF, attach only) or ptrace
	Duration time.Duration // 0: until ctx ends or the target exits
	Syscalls string        // -e: comma-separated names; "" for every call
	Slow     time.Duration // read the site of calls at least this slow (and of failing ones)
	SlowSet  bool          // --slow was given: Log gets only calls at least Slow
	Sites    int           // top Python sites (and whole call paths) per syscall
	// NoKernelWalk: read only the innermost frame of each slow or failing
	// call in the kernel (the fallback), not the whole stack.
	NoKernelWalk bool
	Log          io.Writer // one line per matching call; nil for none
	// Argv: spawn this command under the ptrace engine, from its first
	// instruction (it must be the tracer's own child), instead of tracing s.
	// With a held session (session.Spec.Hold) s is the command, traced by
	// the eBPF engine from its exec; Argv is then what the ptrace engine
	// spawns if eBPF is refused (the holder is let go unrun).
	Argv []string
	// ProgramStdout: where the spawned command's stdout goes (nil: ours).
	ProgramStdout *os.File
	// SetAsked: the command line asked for a set (several -p, --children,
	// --cgroup, --all) where no session carries it (-- CMD under ptrace):
	// the account says that ptrace follows one process.
	SetAsked bool
	// OnEngine is called once the engine is chosen, before tracing starts
	// (a fallback's reason is worth saying before a long trace).
	OnEngine func(Account)
}

// Validate checks the options alone (no target needed).
func (o *Options) Validate() error {
	switch o.Engine {
	case "ptrace", "auto", "tracepoint":
	default:
		return fmt.Errorf("trace: unknown --engine %q (auto, ptrace, tracepoint)", o.Engine)
	}
	if o.Duration < 0 {
		return errors.New("trace: --duration must not be negative")
	}
	if o.Slow < 0 {
		return errors.New("trace: --slow must not be negative")
	}
	if o.Sites < 0 {
		return fmt.Errorf("trace: --sites %d: must be 0 or more", o.Sites)
	}
	_, err := ParseSyscalls(o.Syscalls)
	return err
}

// ErrSpawnTracepoint: the eBPF engine traces a spawned command only when
// it is held before its exec (session.Spec.Hold).
var ErrSpawnTracepoint = errors.New("trace: --engine tracepoint traces a spawned command only when the session holds it before its exec (session.Spec.Hold)")

// Account is what a trace saw, what it could not see and what it cost.
type Account struct {
	Pid      int
	Engine   string // "tracepoint" or "ptrace"
	Note     string // why this engine and how it ran ("" when asked for by name)
	Fallback string // auto wanted eBPF and could not have it: why ("" otherwise)
	Slowdown string // the price class (PtraceSlowdown, …)
	Slow     time.Duration
	Wall     time.Duration
	// Calls: calls counted (ptrace: every exit stop; tracepoint: counted
	// in the kernel). Events: tracepoint events of slow or failing calls
	// read; Lost: events the ring buffer could not hold (Drops has the rest).
	Calls, Events, Lost uint64
	Drops               *KernelDrops
	ObserverCPU         time.Duration
	Stopped             time.Duration // pyobs's own stops of the target (ptrace), summed over threads
	// StoppedBy: the target seen stopped by someone else during the trace
	// (a signal or job control; tracepoint: a tracer too); nil: never.
	StoppedBy       *procfs.Stops
	Stops           uint64 // ptrace stops handled
	Threads         int
	Signals         uint64 // signals passed through to the target
	Restarted       uint64 // interrupted calls the kernel restarted (not counted)
	SiteReads       uint64
	SiteReadsFailed uint64
	SiteReadError   string // why the first failed site read failed
	SiteReadsKernel uint64 // tracepoint: read by the program at the call (exact)
	SiteReadsWalked uint64 // of those: the program found the thread itself
	SiteReadsLate   uint64 // read after the call returned: never attributed
	InProgress      int    // calls in progress at the end (not counted)
	TargetExited    bool
	// Execed (-p PID): the target exec'd a new program and the trace
	// ended there (a *session.ExecedError).
	Execed      error
	Spawned     bool
	ExitCode    int   // the spawned target's status when it exited while traced
	DetachError error // first error while letting the target go
	// StillAttached (ptrace with a seccomp filter): the trace's window is
	// over but the spawned command runs on with the tracer attached,
	// counting nothing (detaching would make its filtered calls fail);
	// it blocks until the command ends and returns its status.
	StillAttached func() int
	// SignalAttached signals the command and what it started that the
	// tracer still waits for.
	SignalAttached func(syscall.Signal) error
	// Children (ptrace with a seccomp filter): processes the command
	// started, bound to its filter: passed through, their calls not
	// traced; ChildrenLeft of them still ran when the window ended.
	Children, ChildrenLeft int
	// Walk: tracepoint engine: the whole Python stacks walked in the
	// kernel at the calls, or why only the innermost frame was read.
	Walk *StackWalk
	// BPF: tracepoint engine: the programs' own run time.
	BPF *BPFRun
	// Set: the tracepoint engine observed a set of processes (several -p,
	// --children, --cgroup, --all): the result has per-process lines and
	// Procs is the set's account.
	Set   bool
	Procs *ProcessAccount
	// Held: the command was held before its exec while the programs
	// loaded and attached; Attach is that one-time cost (the command had
	// not started: it is not part of its run).
	Held   bool
	Attach time.Duration
}

// BPFRun is the kernel's account of the tracepoint programs' runs (they
// run on every syscall of the machine and return at once for other
// processes).
type BPFRun struct {
	Stats     string  `json:"bpf_stats"` // how the kernel's run-time stats were on, or why not
	EnterS    float64 `json:"sys_enter_s"`
	EnterRuns uint64  `json:"sys_enter_runs"`
	ExitS     float64 `json:"sys_exit_s"`
	ExitRuns  uint64  `json:"sys_exit_runs"`
}

// StackWalk is the account of the Python stacks the tracepoint engine
// walked in the kernel at slow or failing calls.
type StackWalk struct {
	On bool `json:"on"`
	// Why: when off, why the kernel read only each call's innermost frame.
	Why string `json:"why,omitempty"`
	// NotPython: the target is not Python (Why says how it was found):
	// no frame at all, not the innermost one only.
	NotPython bool   `json:"not_python,omitempty"`
	Walked    uint64 `json:"walked"`           // calls whose whole stack was walked
	Truncated uint64 `json:"truncated"`        // deeper than the walker goes, or callers missing
	Faulted   uint64 `json:"faulted"`          // a page of the stack not present: no stack, counted
	Invalid   uint64 `json:"invalid"`          // a check failed (torn chain)
	NoThread  uint64 `json:"no_thread_state"`  // calls of threads without a Python thread state found
	NoFrame   uint64 `json:"no_python_frame"`  // a thread state without a frame
	Distinct  uint64 `json:"distinct_stacks"`  // stacks sent to user space
	RingLost  uint64 `json:"ring_lost"`        // stacks the ring had no room for
	Unnamed   uint64 `json:"calls_unnamed"`    // calls whose stack never reached user space
	SymErrors uint64 `json:"symbolize_errors"` // stacks whose code objects could not be read
	// A held command: where the walk's layout came from (its files, read
	// before its exec), and its calls made before its interpreter was up
	// (the walk's addresses not written yet: counted, never named).
	HeldLayout string `json:"held_layout,omitempty"`
	BeforeWalk uint64 `json:"calls_before_walk,omitempty"`
}

// Result is one trace: the account, the rows and the calls still blocked.
type Result struct {
	Account  Account
	Syscalls []SyscallJSON
	Blocked  []BlockedCall
	// Processes: with a set, each process's own line (every member, the
	// ones that made no call too), in the order they joined.
	Processes []ProcessJSON
}

// Run traces s (or spawns opt.Argv) until ctx ends, opt.Duration passes or
// the target exits. The engine is eBPF when it can be, else ptrace, and the
// account says why.
func Run(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	held := s != nil && s.Held()
	if len(opt.Argv) > 0 && opt.Engine == "tracepoint" && !held {
		return nil, ErrSpawnTracepoint
	}
	switch {
	case len(opt.Argv) == 0 && s == nil:
		return nil, errors.New("trace: no target: give a session or a command to spawn")
	case held && len(opt.Argv) == 0:
		return nil, fmt.Errorf("trace pid %d: a held command needs its argv (for the ptrace fallback)", s.Pid)
	case len(opt.Argv) == 0 && s.Py == nil && (s.PyErr == nil || s.Set.Many()):
		return nil, fmt.Errorf("trace pid %d: no Python interpreter open in the session", s.Pid)
	}
	filter, _ := ParseSyscalls(opt.Syscalls)
	r := &sites{filter: filter, slow: opt.Slow, slowSet: opt.SlowSet, agg: New(), logw: opt.Log}
	if held {
		// The command has not run: no interpreter to read yet.
		r.sess, r.pid, r.held, r.set = s, s.Pid, true, s.Set.Many()
	} else if len(opt.Argv) == 0 {
		r.sess, r.tids, r.pid, r.set = s, s.NewTidMap(), s.Pid, s.Set.Many()
		r.mem = pyframes.NewProcessMemory(s.Pid)
		if s.Py == nil {
			// Not Python (session.PythonOptional): its calls are still its
			// calls; they are counted, and the account says why unnamed.
			r.noPy = strings.ReplaceAll(s.PyErr.Error(), "\n", " ")
		}
	}
	defer func() {
		if r.mem != nil {
			_ = r.mem.Close()
		}
	}()
	acct := Account{Pid: r.pid, Slow: opt.Slow}
	t0 := time.Now()
	// The kernel's BPF run-time stats on before the programs attach: the
	// target's calls count from their first one.
	stats, statsNote := bpfload.EnableRunStats()
	if stats != nil {
		defer stats.Close()
	}
	r.statsNote = statsNote
	tp, err := choose(r, opt, &acct)
	if err != nil {
		return nil, err
	}
	if tp == nil && held {
		// ptrace after all: it spawns the command as its own child.
		s.Unhold()
		r.sess, r.pid, r.held = nil, 0, false
	}
	if tp == nil && (r.set || opt.SetAsked) {
		acct.Note = strings.TrimSpace(acct.Note + " (ptrace follows one process: the set's other processes and children are not traced)")
	}
	if r.noPy != "" {
		acct.Note = strings.TrimSpace(acct.Note + " (" + r.noPy + ": calls counted, no Python sites)")
	}
	if opt.OnEngine != nil {
		opt.OnEngine(acct)
	}
	if opt.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Duration)
		defer cancel()
	}
	if tp != nil {
		if held {
			if err := s.Release(); err != nil {
				tp.Close()
				return nil, err
			}
			acct.Held, acct.Attach = true, time.Since(t0)
		}
		return runTracepoint(ctx, r, tp, opt, acct)
	}
	return runPtrace(ctx, r, opt, acct)
}

// choose is the one rule: eBPF when asked for or when auto can load it,
// else ptrace, and say why. It returns the loaded programs, or nil for ptrace.
func choose(r *sites, opt Options, acct *Account) (*tracepoint.Tracer, error) {
	acct.Engine = "ptrace"
	switch {
	case len(opt.Argv) > 0 && opt.Engine == "auto" && !r.held:
		acct.Note = "(auto: a spawned command runs under ptrace from its first instruction)"
		return nil, nil
	case opt.Engine == "ptrace":
		return nil, nil
	}
	// Batched: runTracepoint reads the events every 20 ms (5 while an
	// interpreter starts), and a wake-up per failing call cost the
	// program ~3 µs of it (BENCHMARKS.md).
	cfg := tracepoint.Config{Pid: r.pid, Slow: opt.Slow, Threads: map[int]uint64{}, Batched: true}
	// -p PID alone: its calls after an exec are another program's.
	cfg.EndAtExec = r.sess != nil && !r.sess.Spawned() && !r.set && !r.held
	walkWhy := "--kernel-walk=false"
	if r.set || r.held {
		// The walk takes one layout, the target's (a held command's read
		// from its files); each member is named through its own reader
		// (members.go), one of another build is counted only.
		o := r.sess.Options()
		cfg.Set, cfg.PerPid, cfg.Held = &o, r.set, r.held
		if !opt.NoKernelWalk {
			walkWhy = r.setWalk(&cfg)
		}
	} else if r.noPy != "" {
		walkWhy = r.noPy // counted only: no frame to capture
	} else {
		cfg.Py = tracepoint.OffsetsFor(r.sess.Py.Layout).WithRuntime(r.sess.Py.Info.Runtime)
		if !opt.NoKernelWalk {
			cfg.Walk, r.walkLayout, walkWhy = walkConfig(r.sess)
		}
		// The threads known now go into the kernel's map before it attaches.
		r.tids.Refresh()
		for _, t := range r.tids.All() {
			cfg.Threads[t.NativeID] = t.Addr
		}
		r.tidsAt = time.Now()
	}
	if r.filter != nil {
		cfg.Filter = r.filter
	}
	if opt.Log != nil && !opt.SlowSet {
		cfg.Slow = 0 // --log without --slow: an event for every call
	}
	want := fallback.Auto
	if opt.Engine == "tracepoint" {
		want = fallback.BPFOnly
	}
	var tp *tracepoint.Tracer
	useBPF, err := fallback.Choose(want, func() (err error) {
		tp, err = tracepoint.Open(cfg)
		if err != nil && cfg.Late && cfg.Walk != nil && !fallback.Denied(err) {
			// The layout read before the exec refused: the programs that
			// take the whole walk once the interpreter is up, then.
			r.layoutOnceUp(fmt.Sprintf("loaded with the layout read before the exec: %v", err))
			cfg.Walk = nil
			tp, err = tracepoint.Open(cfg)
		}
		if err != nil && (cfg.Walk != nil || cfg.Late) && !fallback.Denied(err) {
			// The walk is what a kernel may refuse (bpf_loop: 5.17+):
			// the programs without it still read each call's innermost frame.
			walkWhy = fmt.Sprintf("the kernel refused the programs with the stack walk (%v)", err)
			cfg.Walk, cfg.Late = nil, false
			if r.set || r.held {
				cfg.Py = nil // counted only: a captured frame would not be read
			}
			tp, err = tracepoint.Open(cfg)
		}
		return err
	})
	denied := fallback.Denied(err)
	switch {
	case useBPF:
		acct.Engine = "tracepoint"
		acct.Walk = &StackWalk{On: tp.Walking}
		if !tp.Walking {
			acct.Walk.Why = walkWhy
			acct.Walk.NotPython = r.noPy != ""
		}
		if opt.Engine == "auto" {
			acct.Note = "(auto: BPF programs loaded)"
		}
		return tp, nil
	case opt.Engine == "tracepoint" && denied:
		return nil, &capability.GateError{Op: fmt.Sprintf("trace pid %d with eBPF", r.pid), Gate: tracepoint.Gate(),
			Fix: "run as root or grant CAP_BPF and CAP_PERFMON, or use --engine ptrace", Err: err}
	case opt.Engine == "tracepoint":
		return nil, fmt.Errorf("trace pid %d: --engine tracepoint: %w (%s)", r.pid, err, tracepoint.Gate())
	}
	why := err.Error()
	if denied {
		why = "loading the BPF programs: permission denied"
	}
	acct.Fallback = why + "; " + tracepoint.Gate()
	acct.Note = fmt.Sprintf("(auto: eBPF not available: %s)", acct.Fallback)
	return nil, nil
}

// SeccompExec is the seccomp helper of a spawned trace (-e with -- CMD):
// the program re-executes itself, installs the filter and execs CMD before
// anything else. Call it first thing in main (an init); it returns at once
// in a normal run.
func SeccompExec() { tptrace.SeccompExec() }
