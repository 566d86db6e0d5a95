package trace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	tptrace "github.com/pyobs/pyobs/internal/trace/ptrace"
)

// onExit takes one call at its exit stop, the thread still stopped.
func (r *sites) onExit(c *tptrace.Syscall) {
	if r.filter != nil && !r.filter[c.Nr] {
		return
	}
	name := procfs.SyscallName(c.Nr)
	call := Call{Name: name, Dur: c.Dur}
	if e := c.Errno(); e != 0 {
		if e >= tptrace.ERESTARTSYS && e <= tptrace.ERESTART_RESTARTBLOCK {
			// Interrupted by a stop or a signal with no handler: the kernel
			// restarts it (the rest appears as the same call again, or as
			// restart_syscall); the target never sees this result.
			r.restarts++
			return
		}
		call.Errno = tptrace.ErrnoName(e)
	}
	if c.Dur >= r.slow || call.Errno != "" {
		call.SiteTried = true
		// The thread is stopped at its exit: its whole stack is the
		// call's path, read at the call.
		if path := r.site(c.Tid); len(path) > 0 {
			call.Site, call.Path = &path[0], path
		}
		r.siteTried++
		if call.Site == nil {
			r.siteFail++
			why := r.lastWhy
			if why == "" {
				why = "no Python stack found"
			}
			r.agg.NoSiteWhy(name, why)
		}
	}
	r.agg.Add(call)
	if r.logw != nil && (!r.slowSet || c.Dur >= r.slow) {
		fmt.Fprintln(r.logw, logLine(c, name, call, r.mem))
	}
}

// runPtrace runs the ptrace engine until ctx ends or the target exits.
func runPtrace(ctx context.Context, r *sites, opt Options, a Account) (*Result, error) {
	var blocked []BlockedCall
	inProgress := 0
	cfg := tptrace.TraceConfig{Pid: r.pid, Argv: opt.Argv, Stdout: opt.ProgramStdout, OnExit: r.onExit,
		OnInProgress: func(c *tptrace.Syscall) {
			// Stopped inside the call: its stack is where it was made.
			inProgress++
			if c.Dur < opt.Slow {
				return
			}
			if path := r.site(c.Tid); len(path) > 0 {
				blocked = append(blocked, BlockedCall{Tid: c.Tid, Name: procfs.SyscallName(c.Nr), ForUS: float64(c.Dur) / 1e3, Site: &path[0]})
			}
		}}
	// -p PID: its calls after an exec are another program's (as the
	// tracepoint engine's EndAtExec).
	cfg.EndAtExec = len(opt.Argv) == 0 && r.sess != nil && !r.sess.Spawned()
	if len(opt.Argv) > 0 {
		cfg.Seccomp = seccompList(r.filter)
		cfg.OnSpawn = func(pid int) { r.pid = pid; r.mem = pyframes.NewProcessMemory(pid) }
	}
	cpu0 := clock.ObserverCPU()
	start := time.Now()
	st, err := tptrace.Trace(ctx, cfg)
	a.Wall = time.Since(start)
	a.ObserverCPU = clock.ObserverCPU() - cpu0
	if r.mem != nil {
		_ = r.mem.Close()
		r.mem = nil
	}
	if err != nil {
		var se *tptrace.StartError
		if errors.As(err, &se) {
			return nil, session.CommandError(se.Argv0, se.Err) // 127 or 126, as the other engines
		}
		if errors.Is(err, unix.EPERM) && r.sess != nil {
			return nil, r.sess.Explain("PTRACE_SEIZE", err)
		}
		return nil, err
	}
	a.Slowdown = PtraceSlowdown
	if len(cfg.Seccomp) > 0 {
		a.Slowdown = SeccompSlowdown
		if a.Note != "" {
			a.Note += " "
		}
		a.Note += "(seccomp filter: untraced calls never stop)"
	}
	a.Pid, a.Calls, a.Stopped, a.Stops = st.Pid, st.Syscalls, st.Stopped, st.Stops
	if st.GroupStoppedMax > 0 {
		// A stopped tracee shows as t (traced) in /proc, whoever stopped
		// it: the tracer's own account of its group stops says it instead.
		a.StoppedBy = &procfs.Stops{Threads: min(st.GroupStoppedMax, st.Threads), Of: st.Threads,
			Seconds: math.Round(st.GroupStopped.Seconds()*1000) / 1000, State: "T"}
	}
	a.Threads, a.Signals, a.Restarted = st.Threads, st.Signals, r.restarts
	a.SiteReads, a.SiteReadsFailed, a.SiteReadError = r.siteTried, r.siteFail, r.firstSiteErr
	a.TargetExited, a.Spawned, a.ExitCode, a.DetachError = st.TargetGone, len(cfg.Argv) > 0, st.ExitCode, st.DetachError
	if st.Attached != nil {
		a.StillAttached, a.SignalAttached = st.Attached.Wait, st.Attached.Signal
	}
	a.Children, a.ChildrenLeft = st.Children, st.ChildrenLeft
	if st.Execed {
		if a.Execed = r.sess.Execed(); a.Execed == nil {
			a.Execed = fmt.Errorf("pid %d %w", r.pid, session.ErrExeced) // its memory read as the old program's still
		}
	}
	a.InProgress = inProgress
	sort.Slice(blocked, func(i, j int) bool { return blocked[i].ForUS > blocked[j].ForUS })
	return &Result{Account: a, Syscalls: r.agg.Rows(a.Wall, opt.Sites), Blocked: blocked}, nil
}
