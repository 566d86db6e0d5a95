package trace

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/procfs"
	tptrace "github.com/pyobs/pyobs/internal/trace/ptrace"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

// The verdict of the kernel's walk (pywalk.h S_*; kwalk.Flag*).
const (
	walkFault   = 0x4
	walkInvalid = 0x8
	walkNoPy    = 0x10
	walkEmpty   = 0x20
	walkByTLS   = 0x80
)

// bpfRun is the tracepoint engine's user-space side: it drains the ring
// buffer of slow or failing calls, names the Python stack the kernel
// walked (or resolves the one frame it captured, without the walk), and
// keeps the kernel's map of thread states current.
type bpfRun struct {
	run      *sites
	tp       *tracepoint.Tracer
	res      *tracepoint.Resolver
	ks       *kstacks // with the walk
	ms       *members // with the walk over a set or a held command
	before   uint64   // calls of a held command before its walk was on
	unnamed  uint64   // walked calls whose stack never reached user space
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
	var err error
	if b.tp.Walking {
		err = fillThreads(b.tp.Tstates, b.run.pid, m.All())
	} else {
		err = b.tp.SetThreads(ts)
	}
	if err != nil && b.firstErr == "" {
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
		errno = tptrace.ErrnoName(unix.Errno(-e.Ret))
	}
	if (r.set || r.held) && b.ms == nil {
		r.agg.AddUnnamed(name)
		r.agg.NoSiteWhy(name, "no stack walk for the set")
		b.onSetEvent(e, name, errno)
		return
	}
	var site, lateSite *Site
	var path *kpath
	why := "" // no site: why, in a few words (the first in full: siteErr)
	noSite := func(class, format string, a ...any) {
		why = class
		r.siteErr(format, a...)
	}
	// A held command's call before its interpreter was up (the walk's
	// addresses not written yet): counted, never named.
	before := b.ms != nil && e.Py != tracepoint.PyWalked
	switch {
	case before:
		b.before++
	case r.noPy != "":
		noSite(whyNotPython, "%s", r.noPy)
	case e.Py == tracepoint.PyWalked:
		if e.Stack == 0 {
			switch f := e.StackFlags; {
			case f&walkNoPy != 0 && b.ms != nil:
				// A member's thread the map does not have yet: the next
				// fill has it (a late read would need its own process's);
				// a member not walked (not Python, another build) has none.
				if nw := b.ms.notWalked(int(e.Pid)); nw != "" {
					noSite("process not walked", "pid %d: its stacks are not walked: %s", e.Pid, nw)
					break
				}
				b.ms.stale = true
				noSite("thread new to pyobs", "pid %d tid %d: no thread state known at the call (a thread new to pyobs)", e.Pid, e.Tid)
			case f&walkNoPy != 0:
				// No thread state in the map nor the thread's TLS: read
				// the live stack now, labelled late (as without the walk).
				b.stale = true
				if lateSite = r.innermost(e.Tid); lateSite != nil {
					b.late++
				} else {
					why = r.lastWhy
				}
			case f&walkEmpty != 0:
				b.noFrame++
				noSite("no Python frame at the call", "tid %d ran no Python frame at the call", e.Tid)
			case f&(walkFault|walkInvalid) != 0 && b.ms != nil && b.ms.unready(int(e.Pid), int64(e.EnterNs)):
				// Walked with the target's addresses before this member's
				// own were read: its checks fail (or its reads fault),
				// its chain is not torn.
				noSite("interpreter not read yet", "pid %d tid %d: the call came before pyobs had read its interpreter (its addresses not in the kernel yet)", e.Pid, e.Tid)
			case f&walkFault != 0:
				noSite("a stack page not present", "tid %d: a page of the Python stack was not present at the call (walk faulted)", e.Tid)
			case f&walkInvalid != 0:
				noSite("frame chain failed a check (torn)", "tid %d: the Python frame chain failed a check at the call (torn)", e.Tid)
			default:
				noSite("no stack walked", "tid %d: no Python stack walked (flags %#x)", e.Tid, f)
			}
			break
		}
		p, ok := b.ks.lookup(e.Stack)
		switch {
		case !ok:
			b.unnamed++
			noSite("stack lost (ring full)", "tid %d: the stack walked at the call never reached pyobs (stack ring full)", e.Tid)
		case p.err || len(p.frames) == 0:
			noSite("code objects unreadable (freed, or the process exited or exec'd before pyobs read them)", "%s", b.ks.firstErr)
		default:
			if e.Walked || e.StackFlags&walkByTLS != 0 {
				b.walked++
			}
			path, site = p, &p.frames[0]
			b.exact++
		}
	case e.Py == tracepoint.PyCaptured:
		if b.res == nil {
			noSite("frame not resolved", "tid %d: frame captured but no resolver", e.Tid)
			break
		}
		if e.Walked {
			b.walked++
		}
		fr, err := b.res.Site(e)
		if err != nil {
			noSite("frame not resolved", "%v", err)
			break
		}
		site = &Site{Function: fr.Function, File: fr.File, Line: fr.Line}
		b.exact++
	case e.Py == tracepoint.PyNoFrame:
		b.noFrame++
		noSite("no Python frame at the call", "tid %d ran no Python frame at the call", e.Tid)
	default:
		// The kernel could not read the frame (a thread it does not know
		// yet, a page not present, or 3.10): read the live stack now and
		// label it, since the thread may have moved on since the call.
		if e.Py == tracepoint.PyNoThreadState {
			b.stale = true // the walk did not find it either (3.10, another pid namespace)
		}
		lateSite = r.innermost(e.Tid)
		if lateSite != nil {
			b.late++
		} else {
			why = r.lastWhy
		}
	}
	if !before {
		r.siteTried++
	}
	if site == nil && lateSite == nil && !before {
		r.siteFail++
		if why == "" {
			why = "no Python stack found"
		}
		r.agg.NoSiteWhy(name, why)
	}
	switch {
	case before:
		r.agg.AddUnnamed(name)
		r.agg.NoSiteWhy(name, "before the interpreter was up")
	case path != nil:
		if path.key == "" {
			path.key = pathKey(path.frames, path.truncated)
		}
		r.agg.addPath(name, path.key, path.frames, path.truncated)
	default:
		r.agg.AddSite(name, site, lateSite != nil)
	}
	if r.logw != nil && (!r.slowSet || e.Dur >= r.slow) {
		ret := retText(e.Ret, errno)
		where := "-"
		switch {
		case site != nil:
			where = fmt.Sprintf("%s (%s:%d)", site.Function, site.File, site.Line)
		case lateSite != nil:
			where = fmt.Sprintf("[late read: then at %s (%s:%d)]", lateSite.Function, lateSite.File, lateSite.Line)
		}
		if r.set || r.held {
			fmt.Fprintf(r.logw, "%-7d %-7d %10.6fs %s(…) = %s  %s\n", e.Pid, e.Tid, e.Dur.Seconds(), name, ret, where)
		} else {
			fmt.Fprintf(r.logw, "%-7d %10.6fs %s(…) = %s  %s\n", e.Tid, e.Dur.Seconds(), name, ret, where)
		}
	}
}

// onSetEvent takes an event of a set (or a held command): no Python site
// (the programs count only), the --log line names the process.
func (b *bpfRun) onSetEvent(e tracepoint.Event, name, errno string) {
	r := b.run
	if r.logw == nil || (r.slowSet && e.Dur < r.slow) {
		return
	}
	fmt.Fprintf(r.logw, "%-7d %-7d %10.6fs %s(…) = %s  -\n", e.Pid, e.Tid, e.Dur.Seconds(), name, retText(e.Ret, errno))
}

// retText is a call's result as --log shows it.
func retText(ret int64, errno string) string {
	switch {
	case errno != "":
		return "-1 " + errno
	case ret > 1<<32 || ret < -(1<<32):
		return fmt.Sprintf("%#x", uint64(ret))
	}
	return fmt.Sprint(ret)
}

// inProgress reads the site of every call in progress for at least slow:
// the thread is blocked in the kernel, so its stack is where the call was
// made — if the call is still the same one after the read. It returns those
// and the number of calls in progress.
func (b *bpfRun) inProgress(slow time.Duration) ([]BlockedCall, int) {
	var out []BlockedCall
	n := 0
	now := clock.MonoNow()
	live := map[int]bool{}
	if tids, err := procfs.Default().Tasks(b.run.pid); err == nil {
		for _, t := range tids {
			live[t] = true
		}
	}
	for tid, c := range b.tp.InProgress() {
		if !live[tid] {
			continue // a thread that exited leaves its last enter behind
		}
		n++
		dur := time.Duration(now - int64(c[1]))
		if dur < slow {
			continue
		}
		site := b.run.innermost(tid)
		if again, ok := b.tp.InProgress()[tid]; site == nil || !ok || again != c {
			continue // returned meanwhile: the stack may be elsewhere already
		}
		out = append(out, BlockedCall{Tid: tid, Name: procfs.SyscallName(int(c[0])), ForUS: float64(dur) / 1e3, Site: site})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ForUS > out[j].ForUS })
	return out, n
}

// runTracepoint runs the tracepoint engine until ctx ends or the target exits.
func runTracepoint(ctx context.Context, run *sites, tp *tracepoint.Tracer, opt Options, a Account) (*Result, error) {
	defer tp.Close()
	s := run.sess
	b := &bpfRun{run: run, tp: tp, threads: map[int]bool{}}
	// A set or a held command without the walk: no sites, no threads to
	// map, nothing to resolve.
	// Counting only: a set or a held command without the walk, or a
	// process that is not Python (noPy).
	counting := (run.set || run.held) && !tp.Walking || run.noPy != ""
	switch {
	case tp.Walking && (run.set || run.held):
		b.ms = newMembers(run, tp, run.walkLayout)
		b.ks = newSetKstacks(run.pid, b.ms, tp.Stacks)
		b.ms.tick()
	case tp.Walking:
		b.ks = newKstacks(s, run.walkLayout, tp.Stacks)
		b.refreshThreads() // with the fsbase keys the walker also takes
	case !counting && (tracepoint.OffsetsFor(s.Py.Layout) != nil):
		res, err := tracepoint.NewResolver(s.Pid, run.mem, s.Py.Info)
		if err != nil {
			return nil, err
		}
		b.res = res
	}
	bpfRun := &BPFRun{Stats: run.statsNote} // turned on before the attach (Run)
	cpu0 := clock.ObserverCPU()
	start := time.Now()
	// A stopped target makes no calls: its stops are watched so "0 calls"
	// is not taken for an idle program.
	var stops *procfs.StopWatch
	if run.set && tp.Set != nil {
		stops = procfs.WatchStopsOf(procfs.Default(), tp.Set.Live, true) // every member's stops
	} else {
		stops = procfs.WatchStops(procfs.Default(), run.pid, true)
	}
	b.refresh = time.Now()
	gone := false
	for ctx.Err() == nil {
		wait := 20 * time.Millisecond
		if b.ms != nil && b.ms.pending {
			wait = startLook // their calls are named from the look that finds their interpreter up
		}
		if err := tp.ReadEvents(time.Now().Add(wait), b.onEvent); err != nil {
			return nil, fmt.Errorf("trace pid %d: %w", s.Pid, err)
		}
		if b.ks != nil {
			b.ks.drain() // named while their code objects are alive
		}
		if (run.set && !b.live()) || (!run.set && !s.Alive()) {
			gone = true
			break
		}
		if !run.set && !run.held {
			if a.Execed = s.Execed(); a.Execed != nil {
				break // its new program's calls are not the target's
			}
		}
		if b.ms != nil {
			b.ms.tick()
			continue
		}
		// New threads: refresh soon after one shows up, else every 250 ms.
		if !counting && ((b.stale && time.Since(b.refresh) > 5*time.Millisecond) || time.Since(b.refresh) > 250*time.Millisecond) {
			b.refreshThreads()
		}
	}
	if gone && run.held {
		// Its status, for the JSON (the session reaps it).
		select {
		case <-s.Exited():
			a.ExitCode = s.ExitCode()
		case <-time.After(time.Second):
			a.ExitCode = -1
		}
	}
	var blocked []BlockedCall
	if !gone && a.Execed == nil && !counting && b.ms == nil {
		blocked, a.InProgress = b.inProgress(opt.Slow)
	}
	if en, ex, enr, exr, err := tp.RunStats(); err == nil {
		bpfRun.EnterS, bpfRun.ExitS, bpfRun.EnterRuns, bpfRun.ExitRuns = en.Seconds(), ex.Seconds(), enr, exr
	} else {
		bpfRun.Stats += "; " + err.Error()
	}
	a.BPF = bpfRun
	tp.Detach()
	a.Wall = time.Since(start)
	a.StoppedBy = stops.End()
	if err := tp.ReadEvents(time.Time{}, b.onEvent); err != nil {
		return nil, fmt.Errorf("trace pid %d: %w", s.Pid, err)
	}
	stats, c, err := tp.Read()
	if err != nil {
		return nil, fmt.Errorf("trace pid %d: %w", s.Pid, err)
	}
	for _, k := range stats {
		errnos := map[string]uint64{}
		for e, n := range k.Errnos {
			errnos[tptrace.ErrnoName(unix.Errno(e))] += n
		}
		a.Calls += k.Calls
		run.agg.AddKernel(Kernel{Name: procfs.SyscallName(k.Nr), Calls: k.Calls, Errors: k.Errors, Total: k.Total,
			Min: k.Min, Max: k.Max, Hist: k.Hist, Errnos: errnos})
	}
	a.ObserverCPU = clock.ObserverCPU() - cpu0
	if b.firstErr != "" {
		run.siteErr("%s", b.firstErr)
	}
	a.Pid, a.Slowdown, a.Events, a.Lost = s.Pid, TracepointSlowdown, b.events, c.EventsDropped
	a.Drops = &KernelDrops{Events: c.EventsDropped, Hist: c.HistDropped, Errnos: c.ErrnoDropped, Enters: c.StartsDropped}
	a.Threads, a.Restarted, a.TargetExited = len(b.threads), c.Restarted, gone
	a.SiteReads, a.SiteReadsFailed, a.SiteReadError = run.siteTried, run.siteFail, run.firstSiteErr
	a.SiteReadsKernel, a.SiteReadsWalked, a.SiteReadsLate = b.exact, b.walked, b.late
	if w := a.Walk; w != nil && w.On {
		w.Walked, w.Truncated, w.Faulted, w.Invalid = c.Walked, c.Truncated, c.Faulted, c.Invalid
		w.NoThread, w.NoFrame, w.Distinct, w.RingLost = c.NoThread, c.NoFrame, c.Distinct, c.RingLost
		w.Unnamed, w.SymErrors = b.unnamed, b.ks.symErrs
		if b.ms != nil {
			w.BeforeWalk, w.HeldLayout = b.before, run.heldFrom
			if b.ms.late {
				// Never turned on: the command's interpreter never came
				// up as the build its files named.
				w.On, w.Why = false, "counts only: "+b.ms.lateWhy
				if b.ms.lateWhy == "" {
					w.Why = "counts only: the command ran no Python interpreter pyobs could read"
				}
				if run.walkLayout == nil {
					w.HeldLayout = "" // to be taken once up: never was
				}
			}
		}
	}
	res := &Result{Account: a, Syscalls: run.agg.Rows(a.Wall, opt.Sites), Blocked: blocked}
	if run.set {
		per, err := tp.ReadPids()
		if err != nil {
			return nil, fmt.Errorf("trace pid %d: %w", s.Pid, err)
		}
		res.Processes, res.Account.Procs = processes(tp.Set, per, c.PidDropped, stops.Each())
		res.Account.Set = true
	}
	return res, nil
}
