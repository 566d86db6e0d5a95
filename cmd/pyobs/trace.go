package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/ptrace"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/trace"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

// The seccomp helper of a spawned trace (-e with -- CMD) is this program
// re-executed: it installs the filter and execs CMD before anything else.
func init() { ptrace.SeccompExec() }

type traceFlags struct {
	duration time.Duration
	engine   string
	events   string
	slow     time.Duration
	log      bool
	sites    int
}

const (
	ptraceSlowdown  = "ptrace: 2 stops per call"
	seccompSlowdown = "ptrace+seccomp: 2 stops per traced call, none for the rest"
	bpfSlowdown     = "tracepoint: in-kernel aggregation, no stops"
)

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
              The Python site is read by the BPF program while the thread is
              still in the kernel (exact); for a thread it does not know yet
              pyobs reads the stack after the call returned and counts it as
              a late read, never as a site. -e filters in the kernel. No
              arguments in --log. Calls still blocked at the end are
              listed with the line they block at.
  ptrace      stops every thread twice per syscall (PTRACE_SEIZE +
              PTRACE_SYSCALL; never PTRACE_ATTACH, never EINTR in the
              target): exact arguments, but a syscall-heavy program runs
              10-70x slower. Sites are read at the exit stop.
--engine auto uses tracepoint for -p PID when the BPF programs load (root,
or CAP_BPF+CAP_PERFMON), else ptrace, and says why on stderr. Calls whose
site was not read are counted as "unattributed". New threads are followed,
forked children are not.

With -- CMD ARGS, pyobs starts CMD under trace (ptrace engine, from its
first instruction), follows it to its end and exits with its status. With
-e as well, CMD starts with a seccomp filter (pyobs re-executes itself to
install it, then execs CMD) so only the listed calls stop; the rest run at
full speed. CMD keeps no_new_privs, and a filter cannot be removed: if the
trace ends first pyobs stays attached, counting nothing, until CMD ends;
if pyobs is killed, CMD's listed calls fail with ENOSYS.`,
		Example: `  pyobs trace -p 4242 -d 10s
  pyobs trace -p 4242 --format json
  pyobs trace -p 4242 -e openat,newfstatat --log
  pyobs trace -p 4242 --slow 10ms --log
  pyobs trace -p 4242 --engine ptrace --log -e openat
  pyobs trace -- python3 app.py
  pyobs trace -e openat,connect -- python3 app.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runTrace(cmd, g, &f, args) },
	}
	fl := c.Flags()
	fl.DurationVarP(&f.duration, "duration", "d", 0, "how long to trace (0: until Ctrl-C, or the spawned command's end)")
	fl.StringVar(&f.engine, "engine", "auto", "auto, tracepoint (eBPF, -p only) or ptrace")
	fl.StringVarP(&f.events, "expr", "e", "", "only these syscalls, comma-separated (e.g. openat,newfstatat)")
	fl.DurationVar(&f.slow, "slow", time.Millisecond, "read the Python site of calls at least this slow (and of failing calls); with --log, log only these")
	fl.BoolVar(&f.log, "log", false, "print one line per matching call: tid, duration, syscall(args) = result, Python site")
	fl.IntVar(&f.sites, "sites", 3, "top Python sites per syscall")
	return c
}

// syscallNumbers maps names to x86_64 numbers.
func syscallNumbers() map[string]int {
	m := map[string]int{}
	for n := 0; n < 512; n++ {
		if s := procfs.SyscallName(n); !strings.HasPrefix(s, "syscall_") {
			m[s] = n
		}
	}
	return m
}

func parseSyscallList(expr string) (map[int]bool, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	nums := syscallNumbers()
	out := map[int]bool{}
	for _, name := range strings.Split(expr, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		n, ok := nums[name]
		if !ok {
			var close []string
			for k := range nums {
				if strings.Contains(k, name) || strings.Contains(name, k) || editDistance(k, name) <= 2 {
					close = append(close, k)
				}
			}
			sort.Strings(close)
			if len(close) > 8 {
				close = close[:8]
			}
			hint := ""
			if len(close) > 0 {
				hint = " (did you mean " + strings.Join(close, ", ") + "?)"
			}
			return nil, usagef("trace: unknown syscall %q%s", name, hint)
		}
		out[n] = true
	}
	return out, nil
}

func editDistance(a, b string) int {
	d := make([]int, len(b)+1)
	for j := range d {
		d[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := d[0]
		d[0] = i
		for j := 1; j <= len(b); j++ {
			cur := d[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[j] = min(d[j]+1, d[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return d[len(b)]
}

// traceRun is the state of one trace while it runs (all on the tracer's thread).
type traceRun struct {
	pid       int
	sess      *session.Session
	tids      *session.TidMap
	tidsAt    time.Time
	lastTry   time.Time
	filter    map[int]bool
	slow      time.Duration
	slowSet   bool
	agg       *trace.Agg
	logw      io.Writer
	mem       *pyframes.ProcessMemory
	siteTried uint64
	siteFail  uint64
	restarts  uint64
	// firstSiteErr: why the first failed site read failed.
	firstSiteErr string
}

// siteErr keeps the first reason a site read failed, for the JSON.
func (r *traceRun) siteErr(format string, a ...any) {
	if r.firstSiteErr == "" {
		r.firstSiteErr = fmt.Sprintf(format, a...)
	}
}

func (r *traceRun) site(tid int) *trace.Site {
	if r.sess == nil {
		if time.Since(r.lastTry) < 5*time.Millisecond {
			return nil
		}
		r.lastTry = time.Now()
		s, err := session.Attach(r.pid)
		if err != nil {
			return nil
		}
		r.sess, r.tids, r.tidsAt = s, s.NewTidMap(), time.Now()
	}
	ref, ok := r.tids.Lookup(tid)
	if !ok && time.Since(r.tidsAt) > 2*time.Millisecond {
		// The map refreshes itself at most every 20 ms; a thread that got
		// its thread state since (interpreter start-up, a new thread) should
		// not wait that long: start a fresh map (it refreshes at once).
		r.tids, r.tidsAt = r.sess.NewTidMap(), time.Now()
		ref, ok = r.tids.Lookup(tid)
	}
	if !ok {
		r.siteErr("tid %d has no Python thread state", tid)
		return nil
	}
	frames, _, _, err := r.sess.Py.Stack(ref.Addr, pyframes.Options{Retries: 1})
	if err != nil {
		r.siteErr("tid %d: %v", tid, err)
		return nil
	}
	if len(frames) == 0 {
		return nil
	}
	return &trace.Site{Function: frames[0].Function, File: frames[0].File, Line: frames[0].Line}
}

func (r *traceRun) onExit(c *ptrace.Syscall) {
	if r.filter != nil && !r.filter[c.Nr] {
		return
	}
	name := procfs.SyscallName(c.Nr)
	call := trace.Call{Name: name, Dur: c.Dur}
	if e := c.Errno(); e != 0 {
		if e >= ptrace.ERESTARTSYS && e <= ptrace.ERESTART_RESTARTBLOCK {
			// Interrupted by a stop or a signal with no handler: the kernel
			// restarts it (the rest appears as the same call again, or as
			// restart_syscall); the target never sees this result.
			r.restarts++
			return
		}
		call.Errno = ptrace.ErrnoName(e)
	}
	if c.Dur >= r.slow || call.Errno != "" {
		call.SiteTried = true
		call.Site = r.site(c.Tid)
		r.siteTried++
		if call.Site == nil {
			r.siteFail++
		}
	}
	r.agg.Add(call)
	if r.logw != nil && (!r.slowSet || c.Dur >= r.slow) {
		fmt.Fprintln(r.logw, logLine(c, name, call, r.mem))
	}
}

func logLine(c *ptrace.Syscall, name string, call trace.Call, mem *pyframes.ProcessMemory) string {
	ret := fmt.Sprint(c.Ret)
	if call.Errno != "" {
		ret = "-1 " + call.Errno
	} else if c.Ret > 1<<32 || c.Ret < -(1<<32) {
		ret = fmt.Sprintf("%#x", uint64(c.Ret))
	}
	site := "-"
	if call.Site != nil {
		site = fmt.Sprintf("%s (%s:%d)", call.Site.Function, call.Site.File, call.Site.Line)
	}
	return fmt.Sprintf("%-7d %10.6fs %s(%s) = %s  %s", c.Tid, c.Dur.Seconds(), name, argSummary(name, c.Args, mem), ret, site)
}

// argKinds: p path, d fd (AT_FDCWD aware), n number, x hex.
var argKinds = map[string]string{
	"open": "pxx", "openat": "dpxx", "openat2": "dpx", "creat": "px", "stat": "px", "lstat": "px", "access": "pn",
	"newfstatat": "dpxx", "statx": "dpxxx", "faccessat": "dpn", "faccessat2": "dpnx", "readlink": "pxn", "readlinkat": "dpxn",
	"unlink": "p", "unlinkat": "dpx", "mkdir": "px", "mkdirat": "dpx", "rmdir": "p", "chdir": "p", "execve": "pxx",
	"rename": "pp", "renameat": "dpdp", "renameat2": "dpdpx",
	"read": "dxn", "write": "dxn", "pread64": "dxnn", "pwrite64": "dxnn", "readv": "dxn", "writev": "dxn",
	"close": "d", "fstat": "dx", "lseek": "dnn", "ioctl": "dxx", "fcntl": "dnx", "dup": "d", "dup2": "dd", "dup3": "ddx",
	"connect": "dxn", "accept": "dxx", "accept4": "dxxx", "sendto": "dxnxxn", "recvfrom": "dxnxxx", "getdents64": "dxn",
	"clock_nanosleep": "nnxx", "nanosleep": "xx", "select": "nxxxx", "poll": "xnn", "ppoll": "xnxx", "epoll_wait": "dxnn",
	"futex": "xnnx", "mmap": "xnxxdn", "munmap": "xn", "getpid": "", "gettid": "", "exit_group": "n",
}

func argSummary(name string, args [6]uint64, mem *pyframes.ProcessMemory) string {
	kinds, ok := argKinds[name]
	if !ok {
		kinds = "xxx"
	}
	parts := make([]string, 0, len(kinds))
	for i, k := range kinds {
		a := args[i]
		switch k {
		case 'p':
			parts = append(parts, readPath(mem, a))
		case 'd':
			if int32(a) == -100 {
				parts = append(parts, "AT_FDCWD")
			} else {
				parts = append(parts, fmt.Sprint(int32(a)))
			}
		case 'n':
			parts = append(parts, fmt.Sprint(int64(a)))
		default:
			parts = append(parts, fmt.Sprintf("%#x", a))
		}
	}
	return strings.Join(parts, ", ")
}

func readPath(mem *pyframes.ProcessMemory, addr uint64) string {
	if addr == 0 || mem == nil {
		return "NULL"
	}
	buf := make([]byte, 256)
	for n := len(buf); n >= 16; n /= 4 { // a short read can cross into an unmapped page
		if err := mem.Read(addr, buf[:n]); err == nil {
			b := buf[:n]
			if i := strings.IndexByte(string(b), 0); i >= 0 {
				return fmt.Sprintf("%q", b[:i])
			}
			return fmt.Sprintf("%q...", b)
		}
	}
	return fmt.Sprintf("%#x", addr)
}

func runTrace(cmd *cobra.Command, g *globals, f *traceFlags, args []string) error {
	format := g.format
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" {
		return usagef("trace: unknown --format %q (text, json)", format)
	}
	engineNote := ""
	switch f.engine {
	case "ptrace", "auto", "tracepoint":
	default:
		return usagef("trace: unknown --engine %q (auto, ptrace, tracepoint)", f.engine)
	}
	if f.duration < 0 {
		return usagef("trace: --duration must not be negative")
	}
	if f.slow < 0 {
		return usagef("trace: --slow must not be negative")
	}
	filter, err := parseSyscallList(f.events)
	if err != nil {
		return err
	}
	if f.log && format == "json" {
		return usagef("trace: --log writes text lines; use --format text")
	}
	// Target: -p PID attaches (the session checks it is Python); -- CMD is
	// started by the tracer itself (it must be the tracer's own child: a
	// second waiter in pyobs would steal its ptrace stops).
	var argv []string
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		if dash > 0 {
			return usagef("unexpected arguments before --: %q", args[:dash])
		}
		argv = args[dash:]
	} else if len(args) > 0 {
		return usagef("unexpected arguments %q (to spawn a command, put it after --)", args)
	}
	run := &traceRun{filter: filter, slow: f.slow, slowSet: cmd.Flags().Changed("slow"), agg: trace.New()}
	cfg := ptrace.TraceConfig{OnExit: run.onExit}
	if len(argv) > 0 && f.engine == "tracepoint" {
		return usagef("trace: --engine tracepoint attaches to a running process (-p PID); a spawned command is traced with ptrace (--engine auto or ptrace)")
	}
	switch {
	case g.pid != 0 && len(argv) > 0:
		return usagef("give either -p PID or -- CMD ARGS, not both")
	case g.pid < 0:
		return usagef("invalid pid %d", g.pid)
	case g.pid > 0:
		s, err := session.Attach(g.pid)
		if err != nil {
			return err
		}
		run.sess, run.tids, run.pid = s, s.NewTidMap(), g.pid
		cfg.Pid = g.pid
	case len(argv) > 0:
		cfg.Argv = argv
		if filter != nil {
			// Only the traced calls stop (restart_syscall too: the rest of
			// an interrupted sleep comes back as it).
			for nr := range filter {
				cfg.Seccomp = append(cfg.Seccomp, nr)
			}
			sort.Ints(cfg.Seccomp)
			if !filter[unix.SYS_RESTART_SYSCALL] {
				cfg.Seccomp = append(cfg.Seccomp, unix.SYS_RESTART_SYSCALL)
			}
		}
		cfg.OnSpawn = func(pid int) { run.pid = pid; run.mem = pyframes.NewProcessMemory(pid) }
	default:
		return usagef("no target: give -p PID or -- CMD ARGS")
	}
	if run.pid != 0 {
		run.mem = pyframes.NewProcessMemory(run.pid)
	}
	var tp *tracepoint.Tracer
	switch {
	case len(argv) > 0 && f.engine == "auto":
		engineNote = " (auto: a spawned command runs under ptrace from its first instruction)"
	case f.engine != "ptrace":
		tcfg := tracepoint.Config{Pid: run.pid, Slow: f.slow, Threads: map[int]uint64{},
			Py: tracepoint.OffsetsFor(run.sess.Py.Layout).WithRuntime(run.sess.Py.Info.Runtime)}
		// The threads known now go into the kernel's map before it attaches.
		run.tids.Refresh()
		for _, r := range run.tids.All() {
			tcfg.Threads[r.NativeID] = r.Addr
		}
		run.tidsAt = time.Now()
		if filter != nil {
			tcfg.Filter = filter
		}
		if f.log && !run.slowSet {
			tcfg.Slow = 0 // --log without --slow: an event for every call
		}
		tp, err = tracepoint.Open(tcfg)
		switch {
		case err == nil && f.engine == "auto":
			engineNote = " (auto: BPF programs loaded)"
		case err == nil:
		case f.engine == "tracepoint":
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return &capability.GateError{Op: fmt.Sprintf("trace pid %d with eBPF", run.pid), Gate: tracepoint.Gate(),
					Fix: "run as root or grant CAP_BPF and CAP_PERFMON, or use --engine ptrace", Err: err}
			}
			return fmt.Errorf("trace pid %d: --engine tracepoint: %w (%s)", run.pid, err, tracepoint.Gate())
		default:
			why := err.Error()
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				why = "loading the BPF programs: permission denied"
			}
			engineNote = fmt.Sprintf(" (auto: eBPF not available: %s; %s)", why, tracepoint.Gate())
			fmt.Fprintf(os.Stderr, "pyobs trace: eBPF engine not available (%s; %s): using ptrace, which stops every thread twice per syscall\n", why, tracepoint.Gate())
		}
	}
	var logBuf *bufio.Writer
	var logFile *os.File
	if f.log {
		if g.output == "" || g.output == "-" {
			logBuf = bufio.NewWriter(os.Stdout)
		} else {
			logFile, err = os.CreateTemp("", "pyobs-trace-log-*")
			if err != nil {
				return err
			}
			defer os.Remove(logFile.Name())
			defer logFile.Close()
			logBuf = bufio.NewWriter(logFile)
		}
		run.logw = logBuf
	}
	ctx := cmd.Context()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	if tp != nil {
		sum, footer, err := runTraceBPF(ctx, run, tp, f, strings.TrimSpace(engineNote))
		if run.mem != nil {
			_ = run.mem.Close()
		}
		if err != nil {
			return err
		}
		if logBuf != nil {
			_ = logBuf.Flush()
		}
		if err := writeTraceOutput(g.output, format, logFile, &sum, f.log); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, footer+"; wrote "+outWhere(g.output))
		return nil
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	st, err := ptrace.Trace(ctx, cfg)
	wall := time.Since(start)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	obsCPU := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	if run.mem != nil {
		_ = run.mem.Close()
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) && run.sess != nil {
			return run.sess.Explain("PTRACE_SEIZE", err)
		}
		return err
	}
	if logBuf != nil {
		_ = logBuf.Flush()
	}
	pid := st.Pid
	slowdown := ptraceSlowdown
	if len(cfg.Seccomp) > 0 {
		slowdown = seccompSlowdown
		engineNote += " (seccomp filter: untraced calls never stop)"
	}
	sum := traceSummary{
		Schema: 1, Pid: pid, Engine: "ptrace", EngineNote: strings.TrimSpace(engineNote), DurationS: wall.Seconds(),
		Events: st.Syscalls, Lost: 0, ObserverCPUS: obsCPU.Seconds(), TargetStoppedS: st.Stopped.Seconds(),
		Slowdown: slowdown, Threads: st.Threads, Signals: st.Signals, SlowUS: float64(f.slow) / 1e3,
		SiteReads: run.siteTried, SiteReadsFailed: run.siteFail, SiteReadError: run.firstSiteErr, TargetExited: st.TargetGone,
		Syscalls: run.agg.Rows(wall, f.sites), Restarted: run.restarts,
	}
	if len(cfg.Argv) > 0 && st.TargetGone {
		code := st.ExitCode
		sum.ExitCode = &code
	}
	if err := writeTraceOutput(g.output, format, logFile, &sum, f.log); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, traceFooter(&sum, st, engineNote, g.output))
	if st.DetachError != nil {
		return fmt.Errorf("trace: %w (the kernel detaches the rest when pyobs exits)", st.DetachError)
	}
	if len(cfg.Argv) > 0 {
		return finishSpawned(cmd.Context(), st, pid)
	}
	return nil
}

func writeTraceOutput(output, format string, logFile *os.File, sum *traceSummary, log bool) error {
	return writeOutput(output, 0o644, func(w io.Writer) error {
		if logFile != nil {
			if _, err := logFile.Seek(0, 0); err != nil {
				return err
			}
			if _, err := io.Copy(w, logFile); err != nil {
				return err
			}
		}
		if format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(sum)
		}
		return writeTraceText(w, sum, log)
	})
}

func outWhere(out string) string {
	if out != "" && out != "-" {
		return out
	}
	return "stdout"
}

// finishSpawned waits for a spawned target we stopped tracing early, and
// passes its status on.
func finishSpawned(ctx context.Context, st ptrace.TraceStats, pid int) error {
	code := st.ExitCode
	if !st.TargetGone {
		var ws unix.WaitStatus
		done := make(chan struct{})
		go func() {
			for {
				_, err := unix.Wait4(pid, &ws, 0, nil)
				if !errors.Is(err, unix.EINTR) {
					break
				}
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = unix.Kill(pid, unix.SIGTERM)
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				_ = unix.Kill(pid, unix.SIGKILL)
				<-done
			}
		}
		_ = ctx
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = ws.ExitStatus()
		}
	}
	if code != 0 {
		return exitStatus{code}
	}
	return nil
}

// inProgressJSON is a call still blocked when the trace ended, with the
// site read while it blocked (exact: the call had not returned after the read).
type inProgressJSON struct {
	Tid   int     `json:"tid"`
	Name  string  `json:"name"`
	ForUS float64 `json:"for_us"`
	*trace.Site
}

// kernelDrops: what the tracepoint engine's bounded maps could not hold.
type kernelDrops struct {
	Events uint64 `json:"events"`    // slow/failing calls without an event (ring buffer full): no site read
	Hist   uint64 `json:"histogram"` // calls missing from their histogram (p50/p99 from the rest)
	Errnos uint64 `json:"errnos"`    // errors missing from their errno count
	Enters uint64 `json:"enters"`    // enters not recorded: those calls are not counted
}

type traceSummary struct {
	Schema          int                 `json:"schema"`
	Pid             int                 `json:"pid"`
	Engine          string              `json:"engine"`
	EngineNote      string              `json:"engine_note,omitempty"`
	DurationS       float64             `json:"duration_s"`
	Events          uint64              `json:"events"`
	Lost            uint64              `json:"lost"`
	ObserverCPUS    float64             `json:"observer_cpu_s"`
	TargetStoppedS  float64             `json:"target_stopped_s"`
	Slowdown        string              `json:"slowdown_class"`
	Threads         int                 `json:"threads"`
	Signals         uint64              `json:"signals_passed"`
	SlowUS          float64             `json:"slow_us"`
	SiteReads       uint64              `json:"site_reads"`
	SiteReadsFailed uint64              `json:"site_reads_failed"`
	SiteReadError   string              `json:"site_read_error,omitempty"`
	SiteReadsKernel uint64              `json:"site_reads_in_kernel"`
	SiteReadsLate   uint64              `json:"site_reads_late"`
	KernelDrops     *kernelDrops        `json:"kernel_drops,omitempty"`
	InProgress      int                 `json:"in_progress_at_end,omitempty"`
	Blocked         []inProgressJSON    `json:"in_progress,omitempty"`
	TargetExited    bool                `json:"target_exited"`
	Restarted       uint64              `json:"restarted_calls"`
	ExitCode        *int                `json:"exit_code,omitempty"`
	Syscalls        []trace.SyscallJSON `json:"syscalls"`
}

func fmtUS(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.1fµs", us)
}

func writeTraceText(w io.Writer, s *traceSummary, log bool) error {
	bw := bufio.NewWriter(w)
	if log {
		fmt.Fprintln(bw)
	}
	fmt.Fprintf(bw, "pyobs trace: pid %d, %.2fs, engine %s (%s), %d calls\n", s.Pid, s.DurationS, s.Engine, s.Slowdown, s.Events)
	fmt.Fprintf(bw, "%6s %9s %8s %10s %9s %9s %9s  %-18s %s\n", "%wall", "calls", "errors", "total", "p50", "p99", "max", "syscall", "errnos / top Python sites")
	for _, r := range s.Syscalls {
		var errs []string
		for k, v := range r.Errnos {
			errs = append(errs, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(errs)
		fmt.Fprintf(bw, "%6.1f %9d %8d %10s %9s %9s %9s  %-18s %s\n", r.PctWall, r.Calls, r.Errors, fmtUS(r.TotalS*1e6),
			fmtUS(r.P50US), fmtUS(r.P99US), fmtUS(r.MaxUS), r.Name, strings.Join(errs, ", "))
		for _, site := range r.TopSites {
			fmt.Fprintf(bw, "%73s %d× %s (%s:%d)\n", "", site.Calls, site.Function, site.File, site.Line)
		}
		if r.LateReads > 0 {
			fmt.Fprintf(bw, "%73s %d× [late read] (stack read after the call returned: not attributed)\n", "", r.LateReads)
		}
		if (len(r.TopSites) > 0 || r.LateReads > 0) && r.Unattributed > r.LateReads {
			fmt.Fprintf(bw, "%73s %d× unattributed\n", "", r.Unattributed-r.LateReads)
		}
	}
	for _, b := range s.Blocked {
		fmt.Fprintf(bw, "in progress at the end: tid %d in %s for %s at %s (%s:%d)\n", b.Tid, b.Name, fmtUS(b.ForUS), b.Function, b.File, b.Line)
	}
	return bw.Flush()
}

func traceFooter(s *traceSummary, st ptrace.TraceStats, note, out string) string {
	where := "stdout"
	if out != "" && out != "-" {
		where = out
	}
	obs := ""
	if s.DurationS > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*s.ObserverCPUS/s.DurationS)
	}
	end := "detached from every thread"
	if st.TargetGone {
		end = "target exited"
	}
	return fmt.Sprintf("pyobs trace: engine ptrace%s; %d events, lost 0; %d threads, %d signals passed through, %d interrupted calls restarted by the kernel (not counted); sites read for %d calls (%d found none; slow ≥ %s or failing); observer CPU %.2fs%s; target stopped %.3fs (summed over threads); %s; %s; wrote %s",
		note, s.Events, s.Threads, s.Signals, s.Restarted, s.SiteReads, s.SiteReadsFailed, fmtUS(s.SlowUS), s.ObserverCPUS, obs, s.TargetStoppedS, s.Slowdown, end, where)
}

// bpfRun is the tracepoint engine's user-space side: it drains the ring
// buffer of slow or failing calls, resolves the Python frame the kernel
// captured, and keeps the kernel's map of thread states current.
type bpfRun struct {
	run      *traceRun
	tp       *tracepoint.Tracer
	res      *tracepoint.Resolver
	refresh  time.Time
	stale    bool // a thread the kernel did not know made a call
	threads  map[int]bool
	events   uint64
	exact    uint64
	walked   uint64 // of exact: the kernel found the thread's state itself
	late     uint64
	noFrame  uint64
	firstErr string
}

func (b *bpfRun) refreshThreads() {
	b.refresh = time.Now()
	b.stale = false
	m := b.run.sess.NewTidMap()
	m.Refresh()
	ts := map[int]uint64{}
	for _, r := range m.All() {
		ts[r.NativeID] = r.Addr
		b.threads[r.NativeID] = true
	}
	b.run.tids, b.run.tidsAt = m, time.Now()
	if err := b.tp.SetThreads(ts); err != nil && b.firstErr == "" {
		b.firstErr = err.Error()
	}
}

func (b *bpfRun) onEvent(e tracepoint.Event) {
	r := b.run
	b.events++
	b.threads[e.Tid] = true
	name := procfs.SyscallName(e.Nr)
	errno := ""
	if e.Ret < 0 && e.Ret >= -4095 {
		errno = ptrace.ErrnoName(unix.Errno(-e.Ret))
	}
	var site, lateSite *trace.Site
	switch e.Py {
	case tracepoint.PyCaptured:
		if b.res == nil {
			r.siteErr("tid %d: frame captured but no resolver", e.Tid)
			break
		}
		if e.Walked {
			b.walked++
		}
		fr, err := b.res.Site(e)
		if err != nil {
			r.siteErr("%v", err)
			break
		}
		site = &trace.Site{Function: fr.Function, File: fr.File, Line: fr.Line}
		b.exact++
	case tracepoint.PyNoFrame:
		b.noFrame++
		r.siteErr("tid %d ran no Python frame at the call", e.Tid)
	default:
		// The kernel could not read the frame (a thread it does not know
		// yet, a page not present, or 3.10): read the live stack now and
		// label it, since the thread may have moved on since the call.
		if e.Py == tracepoint.PyNoThreadState {
			b.stale = true // the walk did not find it either (3.10, another pid namespace)
		}
		lateSite = r.site(e.Tid)
		if lateSite != nil {
			b.late++
		}
	}
	r.siteTried++
	if site == nil && lateSite == nil {
		r.siteFail++
	}
	r.agg.AddSite(name, site, lateSite != nil)
	if r.logw != nil && (!r.slowSet || e.Dur >= r.slow) {
		ret := fmt.Sprint(e.Ret)
		if errno != "" {
			ret = "-1 " + errno
		} else if e.Ret > 1<<32 || e.Ret < -(1<<32) {
			ret = fmt.Sprintf("%#x", uint64(e.Ret))
		}
		where := "-"
		switch {
		case site != nil:
			where = fmt.Sprintf("%s (%s:%d)", site.Function, site.File, site.Line)
		case lateSite != nil:
			where = fmt.Sprintf("[late read: then at %s (%s:%d)]", lateSite.Function, lateSite.File, lateSite.Line)
		}
		fmt.Fprintf(r.logw, "%-7d %10.6fs %s(…) = %s  %s\n", e.Tid, e.Dur.Seconds(), name, ret, where)
	}
}

// inProgress reads the site of every call in progress for at least slow:
// the thread is blocked in the kernel, so its stack is where the call was
// made — if the call is still the same one after the read. It returns those
// and the number of calls in progress.
func (b *bpfRun) inProgress(slow time.Duration) ([]inProgressJSON, int) {
	var out []inProgressJSON
	n := 0
	now := session.MonoNow()
	for tid, c := range b.tp.InProgress() {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", b.run.pid, tid)); err != nil {
			continue // a thread that exited leaves its last enter behind
		}
		n++
		dur := time.Duration(now - int64(c[1]))
		if dur < slow {
			continue
		}
		site := b.run.site(tid)
		if again, ok := b.tp.InProgress()[tid]; site == nil || !ok || again != c {
			continue // returned meanwhile: the stack may be elsewhere already
		}
		out = append(out, inProgressJSON{Tid: tid, Name: procfs.SyscallName(int(c[0])), ForUS: float64(dur) / 1e3, Site: site})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ForUS > out[j].ForUS })
	return out, n
}

// runTraceBPF runs the tracepoint engine until ctx ends or the target exits.
func runTraceBPF(ctx context.Context, run *traceRun, tp *tracepoint.Tracer, f *traceFlags, note string) (traceSummary, string, error) {
	defer tp.Close()
	s := run.sess
	b := &bpfRun{run: run, tp: tp, threads: map[int]bool{}}
	if tracepoint.OffsetsFor(s.Py.Layout) != nil {
		res, err := tracepoint.NewResolver(s.Pid, run.mem, s.Py.Info)
		if err != nil {
			return traceSummary{}, "", err
		}
		b.res = res
	}
	cpu0 := session.ObserverCPU()
	start := time.Now()
	b.refresh = time.Now()
	gone := false
	for ctx.Err() == nil {
		if err := tp.ReadEvents(time.Now().Add(20*time.Millisecond), b.onEvent); err != nil {
			return traceSummary{}, "", fmt.Errorf("trace pid %d: %w", s.Pid, err)
		}
		if !s.Alive() {
			gone = true
			break
		}
		// New threads: refresh soon after one shows up, else every 250 ms.
		if (b.stale && time.Since(b.refresh) > 5*time.Millisecond) || time.Since(b.refresh) > 250*time.Millisecond {
			b.refreshThreads()
		}
	}
	var blocked []inProgressJSON
	inProgress := 0
	if !gone {
		blocked, inProgress = b.inProgress(f.slow)
	}
	tp.Detach()
	wall := time.Since(start)
	if err := tp.ReadEvents(time.Time{}, b.onEvent); err != nil {
		return traceSummary{}, "", fmt.Errorf("trace pid %d: %w", s.Pid, err)
	}
	stats, c, err := tp.Read()
	if err != nil {
		return traceSummary{}, "", fmt.Errorf("trace pid %d: %w", s.Pid, err)
	}
	var calls uint64
	for _, k := range stats {
		errnos := map[string]uint64{}
		for e, n := range k.Errnos {
			errnos[ptrace.ErrnoName(unix.Errno(e))] += n
		}
		calls += k.Calls
		run.agg.AddKernel(trace.Kernel{Name: procfs.SyscallName(k.Nr), Calls: k.Calls, Errors: k.Errors, Total: k.Total,
			Min: k.Min, Max: k.Max, Hist: k.Hist, Errnos: errnos})
	}
	obsCPU := session.ObserverCPU() - cpu0
	if b.firstErr != "" {
		run.siteErr("%s", b.firstErr)
	}
	sum := traceSummary{
		Schema: 1, Pid: s.Pid, Engine: "tracepoint", EngineNote: note, DurationS: wall.Seconds(),
		Events: calls, Lost: c.EventsDropped, ObserverCPUS: obsCPU.Seconds(), Slowdown: bpfSlowdown,
		Threads: len(b.threads), SlowUS: float64(f.slow) / 1e3, SiteReads: run.siteTried, SiteReadsFailed: run.siteFail,
		SiteReadError: run.firstSiteErr, SiteReadsKernel: b.exact, SiteReadsLate: b.late, TargetExited: gone,
		Syscalls: run.agg.Rows(wall, f.sites), Restarted: c.Restarted, InProgress: inProgress, Blocked: blocked,
		KernelDrops: &kernelDrops{Events: c.EventsDropped, Hist: c.HistDropped, Errnos: c.ErrnoDropped, Enters: c.StartsDropped},
	}
	obs := ""
	if wall > 0 {
		obs = fmt.Sprintf(" (%.1f %% of one CPU)", 100*obsCPU.Seconds()/wall.Seconds())
	}
	end := "programs detached"
	if gone {
		end = "target exited"
	}
	if note != "" {
		note = " " + note
	}
	footer := fmt.Sprintf("pyobs trace: engine tracepoint%s; %d calls counted in the kernel; %d events of slow or failing calls read (lost %d: ring buffer full); kernel map drops: histogram %d, errno %d, enters %d; %d threads; %d interrupted calls restarted by the kernel (not counted); %d calls in progress at the end (not counted); sites for %d calls: %d read in the kernel at the call (%d of new threads found by walking the interpreter's thread list), %d late reads (after the call returned: not attributed), %d found none (slow ≥ %s or failing); observer CPU %.2fs%s; target stopped 0s — %s (ptrace: 2 stops per call); %s",
		note, calls, b.events, c.EventsDropped, c.HistDropped, c.ErrnoDropped, c.StartsDropped, len(b.threads), c.Restarted, inProgress,
		run.siteTried, b.exact, b.walked, b.late, run.siteFail, fmtUS(sum.SlowUS), obsCPU.Seconds(), obs, bpfSlowdown, end)
	return sum, footer, nil
}
