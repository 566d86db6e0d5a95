package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/perfevent"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/report"
	"github.com/pyobs/pyobs/internal/session"
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
multiplexed). It ends with verdicts: on-cpu, off-cpu, cpu-throttled,
runqueue-saturated, cpu-contention, blocking, blocking-io, major-faults,
memory-pressure, fd-pressure, gil-bound, multiplexed — each with the numbers
that triggered it, the threshold, and the next command to run.

Price: counting — file reads from /proc and /sys, and perf counters the
kernel saves on each context switch. Nothing is stopped.
Cannot see: where time goes (no stacks: use record/offcpu for that); states
are polled (every --poll), so a short block between polls is not seen.

-i INTERVAL: live mode, one report per interval until Ctrl-C (or -d when
given): a refreshed table on a terminal, a JSON line per interval otherwise.
-- CMD ARGS: starts CMD and reports whole-run counters when it exits (CPU,
faults and switches from wait4, like time -v), then exits with its status.
The target need not be Python; Python thread names are shown when it is.`,
		Example: `  pyobs stat -p 4242
  pyobs stat -p 4242 -d 10s --format json
  pyobs stat -p 4242 -i 1s
  pyobs stat -- python3 job.py`,
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

// targetAny: -p PID attaches without requiring Python (stat; red needs it
// only for --slowest stacks); -- CMD spawns.
func targetAny(cmd *cobra.Command, g *globals, args []string) (*session.Session, error) {
	if g.pid > 0 {
		if len(args) > 0 {
			if cmd.ArgsLenAtDash() >= 0 {
				return nil, usagef("give either -p PID or -- CMD ARGS, not both")
			}
			return nil, usagef("unexpected arguments %q (to spawn a command, put it after --)", args)
		}
		s, _, err := session.AttachAny(g.pid)
		return s, err
	}
	return target(cmd, g, args)
}

func runStat(cmd *cobra.Command, g *globals, f *statFlags, args []string) error {
	format := g.format
	if format != "" && format != "text" && format != "json" {
		return usagef("stat: unknown --format %q (text, json)", format)
	}
	if f.dur <= 0 && !(f.interval > 0 && !cmd.Flags().Changed("duration")) {
		return usagef("stat: -d must be positive")
	}
	if f.interval < 0 {
		return usagef("stat: -i must be positive")
	}
	if f.interval > 0 && f.interval < 10*time.Millisecond {
		return usagef("stat: -i below 10ms measures the observer, not the target")
	}
	if f.poll < time.Millisecond {
		return usagef("stat: --poll must be at least 1ms")
	}
	start := time.Now()
	s, err := targetAny(cmd, g, args)
	if err != nil {
		return err
	}
	m := newMeter(s, f)
	ctx := cmd.Context()
	if s.Spawned() {
		return m.run(ctx, g, format, start)
	}
	defer m.close()
	if f.interval > 0 {
		return m.live(ctx, cmd, g, f, format)
	}
	st, err := m.window(ctx, f.dur)
	if err != nil {
		return err
	}
	return writeStat(g.output, format, st)
}

func writeStat(path, format string, st *report.Stat) error {
	return writeOutput(path, 0o644, func(w io.Writer) error {
		if format == "json" {
			return report.WriteStatJSON(w, st, true)
		}
		return report.WriteStatText(w, st)
	})
}

// meter takes snapshots of one target.
type meter struct {
	s       *session.Session
	f       *statFlags
	cg      procfs.Cgroups
	place   procfs.CgroupPlace
	cgErr   string
	perf    *perfevent.Set
	perfErr string
	names   map[int]string
	states  map[int]map[string]int
	wchans  map[int]map[string]int
	notes   []string
	cpus    int
	delay   string
}

type snapshot struct {
	p    *procfs.Sample
	cg   *procfs.CgroupCPU
	ps   procfs.Pressure
	perf perfevent.Reading
}

func newMeter(s *session.Session, f *statFlags) *meter {
	m := &meter{s: s, f: f, cg: procfs.NewCgroups(), cpus: onlineCPUs(), delay: delayAcct()}
	m.resetPolls()
	if pl, err := m.cg.Locate(s.Pid); err == nil {
		m.place = pl
		if pl.Version == 0 {
			m.cgErr = "(no cgroup hierarchy with the cpu controller is mounted)"
		}
	} else {
		m.cgErr = err.Error()
	}
	if !f.noPerf {
		tids, _ := s.FS.Tasks(s.Pid)
		set, err := perfevent.Open(s.Pid, tids, perfevent.DefaultGroups)
		if err != nil {
			m.perfErr = "perf counters unavailable: " + err.Error()
		} else {
			m.perf = set
			if set.Denied != "" {
				m.perfErr = "some perf events were refused by " + set.Denied
			}
			for _, n := range set.Notes {
				m.notes = append(m.notes, "perf: "+n)
			}
		}
	}
	if s.Py != nil {
		m.names = s.ThreadNames()
	}
	return m
}

func (m *meter) close() {
	if m.perf != nil {
		m.perf.Close()
	}
}

func (m *meter) resetPolls() {
	m.states = map[int]map[string]int{}
	m.wchans = map[int]map[string]int{}
}

// snap reads everything; only a vanished process is an error.
func (m *meter) snap(smaps bool) (*snapshot, error) {
	p, err := m.s.FS.Sample(m.s.Pid, procfs.SampleOptions{Smaps: smaps, Threads: true})
	if err != nil {
		return nil, err
	}
	sn := &snapshot{p: p}
	m.observe(p)
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			sn.cg = &c
		} else {
			m.cgErr = err.Error()
		}
	}
	sn.ps = m.cg.ReadPressure(m.place)
	m.readPerf(sn)
	return sn, nil
}

func (m *meter) readPerf(sn *snapshot) {
	if m.perf == nil {
		return
	}
	r, err := m.perf.Read()
	if err != nil {
		m.perfErr = err.Error()
		return
	}
	sn.perf = r
}

func (m *meter) observe(p *procfs.Sample) {
	for _, t := range p.Threads {
		if m.states[t.Tid] == nil {
			m.states[t.Tid] = map[string]int{}
		}
		m.states[t.Tid][t.State]++
		if t.State != "R" && t.Wchan != "" {
			if m.wchans[t.Tid] == nil {
				m.wchans[t.Tid] = map[string]int{}
			}
			m.wchans[t.Tid][t.Wchan]++
		}
	}
}

// lightSnap is a poll inside a window: threads and states, no smaps.
func (m *meter) lightSnap() (*snapshot, error) {
	p, err := m.s.FS.Sample(m.s.Pid, procfs.SampleOptions{Threads: true})
	if err != nil {
		return nil, err
	}
	m.observe(p)
	return &snapshot{p: p}, nil
}

func (m *meter) input(mode string, a, b *snapshot, complete bool) report.Input {
	in := report.Input{Pid: m.s.Pid, Mode: mode, A: a.p, B: b.p, Complete: complete, Place: m.place,
		CgA: a.cg, CgB: b.cg, CgErr: m.cgErr, PsA: a.ps, PsB: b.ps, Names: m.names, Python: m.s.Py != nil,
		States: m.states, Wchans: m.wchans, OnlineCPUs: m.cpus, DelayAcct: m.delay, Notes: append([]string{}, m.notes...)}
	if m.perf != nil && b.perf.Threads != nil {
		in.Counters = perfevent.Window(a.perf, b.perf)
	}
	in.PerfNote = m.perfErr
	if m.s.Py == nil {
		in.Notes = append(in.Notes, "thread names are the kernel's (comm): the Python frame walker is not available for this target")
	}
	return in
}

// window measures one window of length dur (or until ctx ends).
func (m *meter) window(ctx context.Context, dur time.Duration) (*report.Stat, error) {
	a, err := m.snap(false)
	if err != nil {
		return nil, m.s.Explain("read the process", err)
	}
	b, complete, early := m.until(ctx, a, time.Now().Add(dur))
	in := m.input("window", a, b, complete)
	if early {
		in.Notes = append(in.Notes, fmt.Sprintf("ended early by a signal after %.2f s", b.p.Time.Sub(a.p.Time).Seconds()))
	}
	if m.s.Py != nil {
		if names := m.s.ThreadNames(); names != nil {
			m.names = names
			in.Names = names
		}
	}
	return report.Build(in), nil
}

// until polls from a until the deadline, the target's exit, or ctx; it
// returns the final snapshot (full when the target is still there, else
// the last good poll with the counters read at exit).
func (m *meter) until(ctx context.Context, a *snapshot, deadline time.Time) (b *snapshot, complete, early bool) {
	last := a
	poll := m.f.poll
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		if wait > poll {
			wait = poll
		}
		select {
		case <-ctx.Done():
			early = true
		case <-time.After(wait):
		}
		if early || !time.Now().Before(deadline) {
			break
		}
		sn, err := m.lightSnap()
		if err != nil {
			return m.gone(a, last), false, false
		}
		last = sn
	}
	sn, err := m.snap(true)
	if err != nil {
		return m.gone(a, last), false, early
	}
	return sn, true, early
}

// gone completes the last good poll after the target vanished.
func (m *meter) gone(a, last *snapshot) *snapshot {
	b := *last
	if b.cg == nil && m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			b.cg = &c
		}
	}
	b.ps = m.cg.ReadPressure(m.place)
	m.readPerf(&b)
	m.notes = append(m.notes, fmt.Sprintf("pid %d exited during the window: the report covers %.2f s, up to the last successful read (perf counters up to its exit)",
		m.s.Pid, b.p.Time.Sub(a.p.Time).Seconds()))
	return &b
}

// live prints one report per interval.
func (m *meter) live(ctx context.Context, cmd *cobra.Command, g *globals, f *statFlags, format string) error {
	var end time.Time
	if cmd.Flags().Changed("duration") {
		end = time.Now().Add(f.dur)
	}
	out, tty, format, closeOut, err := liveOutput(g, format)
	if err != nil {
		return err
	}
	defer closeOut()
	a, err := m.snap(false)
	if err != nil {
		return m.s.Explain("read the process", err)
	}
	for {
		deadline := time.Now().Add(f.interval)
		if !end.IsZero() && end.Before(deadline) {
			deadline = end
		}
		m.resetPolls()
		b, complete, early := m.until(ctx, a, deadline)
		st := report.Build(m.input("interval", a, b, complete))
		if format == "json" {
			err = report.WriteStatJSON(out, st, false)
		} else {
			if tty {
				fmt.Fprint(out, "\x1b[H\x1b[2J")
			}
			err = report.WriteStatText(out, st)
			if !tty {
				fmt.Fprintln(out)
			}
		}
		if err != nil {
			if errors.Is(err, unix.EPIPE) {
				return nil
			}
			return err
		}
		if !complete || early || (!end.IsZero() && !time.Now().Before(end)) {
			return nil
		}
		m.notes = nil
		a = b
	}
}

// run measures a spawned command from start to exit.
func (m *meter) run(ctx context.Context, g *globals, format string, started time.Time) error {
	defer m.close()
	a := &snapshot{p: &procfs.Sample{Time: started, Pid: m.s.Pid}}
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			a.cg = &c
		}
	}
	a.ps = m.cg.ReadPressure(m.place)
	var last *snapshot
	tick := time.NewTicker(m.f.poll)
	defer tick.Stop()
	interrupted := false
	tries := 0
loop:
	for {
		select {
		case <-m.s.Exited():
			break loop
		case <-ctx.Done():
			if !interrupted {
				interrupted = true
				go func() { // Ctrl-C reached the whole group; give it its chance to finish
					select {
					case <-m.s.Exited():
					case <-time.After(5 * time.Second):
						m.s.Kill(2 * time.Second)
					}
				}()
			}
			<-m.s.Exited()
			break loop
		case <-tick.C:
			if sn, err := m.lightSnap(); err == nil {
				last = sn
				if m.s.Py == nil && tries < 10 {
					tries++
					m.s.TryPython()
				}
				if m.s.Py != nil {
					if m.names == nil {
						m.names = map[int]string{}
					}
					if n := m.s.ThreadNames(); n != nil {
						for k, v := range n {
							m.names[k] = v
						}
					}
				}
			}
		}
	}
	end := time.Now()
	b := &snapshot{p: &procfs.Sample{Pid: m.s.Pid}}
	if last != nil {
		cp := *last.p
		b.p = &cp
		m.notes = append(m.notes, fmt.Sprintf("per-thread numbers, memory gauges and I/O are as of the last poll, %.0f ms before the exit",
			float64(end.Sub(last.p.Time).Milliseconds())))
	} else {
		m.notes = append(m.notes, "the command exited before the first poll: per-thread numbers are missing")
	}
	b.p.Time = end
	if m.place.Version != 0 {
		if c, err := m.cg.ReadCPU(m.place); err == nil {
			b.cg = &c
		}
	}
	b.ps = m.cg.ReadPressure(m.place)
	m.readPerf(b)
	in := m.input("run", a, b, true)
	in.Rusage = m.s.Rusage()
	if ru := in.Rusage; ru != nil {
		if r := uint64(ru.Inblock) * 512; r > b.p.IO.ReadBytes {
			b.p.IO.ReadBytes = r
		}
		if w := uint64(ru.Oublock) * 512; w > b.p.IO.WriteBytes {
			b.p.IO.WriteBytes = w
		}
	}
	code := m.s.ExitCode()
	in.ExitCode = &code
	if m.perf != nil {
		in.Notes = append(in.Notes, "perf counters were opened just after the command started: its first instants are not counted")
	}
	st := report.Build(in)
	if st.Comm == "" {
		st.Comm = "?"
	}
	if format == "" {
		format = "text"
	}
	if err := writeStat(g.output, format, st); err != nil {
		return err
	}
	if code != 0 {
		return exitStatus{code}
	}
	return nil
}

func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func onlineCPUs() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) > 3 && strings.HasPrefix(l, "cpu") && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

func delayAcct() string {
	b, err := os.ReadFile("/proc/sys/kernel/task_delayacct")
	if err != nil {
		return "unknown"
	}
	switch strings.TrimSpace(string(b)) {
	case "0":
		return "off"
	case "1":
		return "on"
	}
	return "unknown"
}
