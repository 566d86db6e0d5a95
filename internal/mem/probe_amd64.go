//go:build amd64

package mem

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/mem/probebpf"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// probeRun observes one window with the allocator uprobes. A returned
// error wrapping probebpf.ErrUnavailable means nothing was attached.
func probeRun(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	kl, err := s.Py.KernelLayout()
	if err != nil {
		return nil, fmt.Errorf("%w: pid %d: %w", probebpf.ErrUnavailable, s.Pid, err)
	}
	tls, err := s.Py.TLSOffsets()
	if err != nil {
		tls = nil // threads are then found through the map filled below
	}
	bin := s.Py.Info.Binary
	path := s.FS.RootPath(s.Pid, bin) // through a live thread if the main one exited
	sb := opt.SampleBytes
	if sb == 0 {
		sb = DefaultSampleBytes
	}
	// The kernel refuses a uprobe on a zombie: a process whose main
	// thread has exited is probed through one of its live threads.
	on, ok := s.FS.LiveTask(s.Pid)
	if !ok {
		on = s.Pid
	}
	p, err := probebpf.Load(probebpf.Config{Pid: s.Pid, Tid: on, Binary: path, Layout: kl, TLS: tls, MaxFrames: probeFrames,
		SampleBytes: sb, LibC: libc(s.Pid), NativeBytes: nativeBytes(opt)})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	t0 := monotonic()
	if refs, err := s.Py.ThreadRefs(); err == nil {
		_ = p.SetThreads(s.Pid, refs)
	}
	res := &Result{Pid: s.Pid, Python: s.Py.Version().String(), Engine: EngineProbe, Frames: probeFrames,
		Probe: &ProbeStats{Binary: bin, Probed: p.Probed, Missing: p.Missing, Inlined: p.Inlined, SampleBytes: sb}}

	// The stacks: read as they come and symbolized at once (the code
	// objects are alive then), with the thread map refreshed now and then;
	// one goroutine owns s.Py for the window.
	sym := kwalk.NewSymbolizer(s.Py, kl)
	sym.P = s.GuardCode(sym.P) // -p PID: no name read from a program it exec'd
	stacks := map[uint64][]Frame{}
	done := make(chan struct{})
	readerDone := make(chan struct{})
	read := func(deadline time.Time) {
		for {
			b, ok, err := p.Ring.Next(deadline)
			if err != nil || !ok {
				return
			}
			smp, err := kwalk.Decode(b)
			if err != nil {
				res.Probe.Stacks.Unnamed++
				continue
			}
			fr, err := sym.Frames(&smp)
			if err != nil {
				res.Probe.Stacks.SymErrors++
				if len(fr) == 0 {
					continue
				}
			}
			st := make([]Frame, len(fr))
			for i, f := range fr {
				st[i] = Frame{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry}
			}
			stacks[smp.ID] = st
		}
	}
	var nat *natStacks
	natDone := make(chan struct{})
	if p.NatRing != nil {
		nat = newNatStacks(probebpf.MaxNativeBytes)
		res.Probe.Native = &nat.stats
		go func() {
			defer close(natDone)
			readNative(p.NatRing, nat, s.Pid, done)
		}()
	} else {
		close(natDone)
	}
	go func() {
		defer close(readerDone)
		last := time.Now()
		for {
			select {
			case <-done:
				read(time.Now()) // what is there now
				return
			default:
			}
			read(time.Now().Add(100 * time.Millisecond))
			if time.Since(last) > time.Second {
				if refs, err := s.Py.ThreadRefs(); err == nil {
					_ = p.SetThreads(s.Pid, refs)
				}
				last = time.Now()
			}
		}
	}()

	var rss []rssPoint
	var traced [][2]float64
	sample := func() {
		now := monotonic()
		if c, err := p.ReadCounters(); err == nil {
			traced = append(traced, [2]float64{now, float64(int64(c[probebpf.CLiveEst]))})
		}
		if sm, err := smaps(s); err == nil && s.Execed() == nil { // after an exec: the new program's
			rss = append(rss, rssPoint{mono: now, rss: sm.Rss, pss: sm.Pss})
		}
	}
	// RSS and PSS bound the window the probes count: read once they are
	// attached and again as it ends, not around the load (a second or more)
	// or the drain, when a growing target grows uncounted.
	rssStart, smErr := smaps(s)
	if smErr == nil && s.Execed() != nil {
		smErr = fmt.Errorf("pid %d exec'd before the window began: no reading of its program", s.Pid)
	}
	sample()
	stopped := s.FS.TaskStopped(s.Pid, s.Pid) // by someone else: it allocates nothing while so
	t := time.NewTimer(opt.Duration)
	tick := time.NewTicker(curvePeriod(opt.Duration))
	// -p PID: an exec ends the window (the probes would count the new
	// program's allocations, if it is the same binary).
	execTick := time.NewTicker(20 * time.Millisecond)
	defer execTick.Stop()
	alive := monotonic() // the probes' thread last seen alive
	reopenErrs := 0      // failed reopens in a row
wait:
	for {
		select {
		case <-execTick.C:
			if s.Execed() != nil {
				t.Stop()
				break wait
			}
			if s.FS.TaskEnded(s.Pid, p.Tid) {
				if moveProbes(s, p, bin, t0, &alive, &reopenErrs, res) {
					continue
				}
				t.Stop()
				break wait
			}
			alive = monotonic()
		case <-tick.C:
			sample()
		case <-t.C:
			break wait
		case <-ctx.Done():
			t.Stop()
			res.Interrupted = true
			break wait
		}
	}
	tick.Stop()
	end := monotonic()
	rssEnd, smErr2 := smaps(s)
	if xe := execedAs(s.Execed()); xe != nil {
		// The old program's memory ends with its last reading before the
		// exec; what the new one holds is not its.
		res.Execed = xe.Now()
		if len(rss) > 0 {
			last := rss[len(rss)-1]
			rssEnd.Rss, rssEnd.Pss, smErr2 = last.rss, last.pss, nil
		}
	}
	if st := s.FS.TaskStopped(s.Pid, s.Pid); st != "" || stopped != "" {
		when, state := "start", stopped
		switch {
		case st != "" && stopped != "":
			when = "start and end"
		case st != "":
			when, state = "end", st
		}
		res.Stopped = fmt.Sprintf("the target was stopped by someone else (state %s) at the window's %s: it allocates nothing while stopped", state, when)
	}
	if err := p.Stop(uint64(end * 1e9)); err != nil {
		close(done)
		<-readerDone
		<-natDone
		return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
	}
	sample()
	res.Probe.Missed = p.Missed()
	p.Detach()
	close(done)
	<-readerDone
	<-natDone
	res.WindowS = end - t0

	c, err := p.ReadCounters()
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't read the probes' counters: %w", s.Pid, err)
	}
	ps := res.Probe
	ps.Calls, ps.Frees, ps.Tracked, ps.Freed = c[probebpf.CCalls], c[probebpf.CFrees], c[probebpf.CTracked], c[probebpf.CFreed]
	ps.LiveEnd, ps.NullReturns, ps.Replaced = c[probebpf.CLiveN], c[probebpf.CNull], c[probebpf.CReplaced]
	ps.DroppedLive, ps.DroppedEst, ps.DroppedPend = c[probebpf.CDropLive], c[probebpf.CDropLiveEst], c[probebpf.CDropPend]
	ps.Stacks.Walked, ps.Stacks.Truncated, ps.Stacks.Fault = c[probebpf.CPyWalked], c[probebpf.CPyTrunc], c[probebpf.CPyFault]
	ps.Stacks.Invalid, ps.Stacks.NoPython, ps.Stacks.Empty = c[probebpf.CPyInvalid], c[probebpf.CPyNoPy], c[probebpf.CPyEmpty]
	ps.Stacks.Distinct, ps.Stacks.Lost = c[probebpf.CPyNew], c[probebpf.CPyLost]
	if nat != nil {
		nat.stats.Copies, nat.stats.Lost = c[probebpf.CNatSent], c[probebpf.CNatLost]
		if c[probebpf.CNatSent] > 0 {
			nat.stats.MeanBytes = c[probebpf.CNatBytes] / c[probebpf.CNatSent]
		}
	}

	// What lives at the end, by stack.
	var live []probebpf.Live
	var k uint64
	var v probebpf.Live
	it := p.Lives.Iterate()
	for it.Next(&k, &v) {
		live = append(live, v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("pid %d: can't read the live allocations: %w", s.Pid, err)
	}
	all, total := liveSites(live, stacks, nat)
	res.GrowthTotalBytes, res.Sites = total, len(all)
	res.TracedBytesEnd = total
	for _, q := range traced {
		res.TracedPeakBytes = max(res.TracedPeakBytes, int64(q[1]))
	}
	res.allGrowth = all
	res.Growth, res.GrowthOther = selectGrowth(all, total, opt.MinGrowthShare, opt.Top, res.WindowS)
	res.BySize = append([]Site{}, all[:min(len(all), opt.Top)]...)
	byCount := append([]Site{}, all...)
	sort.SliceStable(byCount, func(i, j int) bool { return byCount[i].Count > byCount[j].Count })
	res.ByCount = byCount[:min(len(byCount), opt.Top)]
	res.Memory = memory(rssStart, rssEnd, smErr, smErr2)
	res.Curve = curve(t0, traced, rss)
	return res, nil
}

// moveProbes opens the probes again on a live thread of the target after
// theirs ended (the kernel fires them only while it lives), said in
// res.ProbesMoved; a failure is tried again at the next tick, its time in
// the gap. It returns whether the window goes on; if not, res.ProbesEnded
// says why.
func moveProbes(s *session.Session, p *probebpf.Probes, bin string, t0 float64, alive *float64, fails *int, res *Result) bool {
	from := p.Tid
	on, ok := s.FS.LiveTask(s.Pid)
	if !ok || on == from {
		res.ProbesEnded = fmt.Sprintf("thread %d, which the probes were opened on, ended %.2f s into the window, and no other thread lives to take them: the kernel fires them only while their thread lives; the window ended there (seen within 20 ms)",
			from, monotonic()-t0)
		return false
	}
	err := p.Reopen(on, s.FS.RootPath(s.Pid, bin), libc(s.Pid))
	if err == nil {
		now := monotonic()
		res.ProbesMoved = append(res.ProbesMoved, ProbesMove{From: from, To: on, AtS: now - t0, GapS: now - *alive})
		*alive, *fails = now, 0
		return true
	}
	if *fails++; *fails < 3 {
		return true
	}
	res.ProbesEnded = fmt.Sprintf("thread %d, which the probes were opened on, ended %.2f s into the window, and opening them on thread %d failed 3 times (%v): the kernel fires them only while their thread lives; the window ended there",
		from, monotonic()-t0, on, err)
	return false
}

// libc is the C library pid maps (a path pyobs can open), "" when none is
// found.
func libc(pid int) string {
	maps, err := pyframes.ReadMaps(pid)
	if err != nil {
		return ""
	}
	for _, m := range maps {
		b := filepath.Base(m.Path)
		if m.Exec() && (b == "libc.so.6" || strings.HasPrefix(b, "libc-")) {
			return procfs.Default().RootPath(pid, m.Path)
		}
	}
	return ""
}
