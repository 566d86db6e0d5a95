package procfs

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
)

// StopLook is how often a StopWatch reads its target's thread states: at
// most; a look whose CPU time is more than StopShare of the time to the
// next one (a set of many processes: thousands of stat files) puts the
// next one later, so the watch never costs more than that share of a
// CPU. (CPU time, not wall time: a look preempted by a busy machine's
// other work costs nothing more, and must not look less often.)
const (
	StopLook  = 100 * time.Millisecond
	StopShare = 0.02
	// stopLookMax: the longest wait between looks, however long one took.
	stopLookMax = 5 * time.Second
)

// Stops says that threads of a process were seen stopped by someone else —
// a job-control stop (SIGSTOP, SIGTSTP, …: state T) or a tracer's stop
// (state t) — at some of a StopWatch's looks. A stopped thread runs
// nothing: a window over it is empty or thin for that reason, not because
// the program was idle or waiting.
type Stops struct {
	Threads int `json:"threads"` // the most threads seen stopped at one look
	Of      int `json:"of"`      // the threads the process (a set: all its processes) had at that look
	// Seconds: how long at least one thread was seen stopped, to a look's
	// period (LookMS).
	Seconds float64 `json:"seconds"`
	State   string  `json:"state"` // "T" (job control), "t" (tracer) or "T and t"
	LookMS  int     `json:"look_ms"`
	// A set's watch (WatchStopsOf): at that look, the processes with a
	// stopped thread and the processes looked at; 0 for one process.
	Processes int `json:"processes,omitempty"`
	Members   int `json:"members,omitempty"`
}

// Phrase is "the target (its 3 threads) was stopped by a signal (…) for
// about 2.0s of the 4.00s window (50 %)"; window 0 leaves the share out.
func (s Stops) Phrase(window float64) string {
	p := fmt.Sprintf("%s stopped %s for about %.1fs", s.Who(), s.By(), s.Seconds)
	if window > 0 {
		p += fmt.Sprintf(" of the %.2fs window (%.0f %%)", window, 100*math.Min(1, s.Seconds/window))
	}
	return p
}

// Who is the subject of a sentence about the stop: "the target (its 3
// threads) was", "1 of the target's 3 threads were" or, for a set, "2 of
// the set's 9 threads (in 1 of its 3 processes) were".
func (s Stops) Who() string {
	if s.Members > 0 {
		return fmt.Sprintf("%d of the set's %d threads (in %d of its %d processes) were", s.Threads, s.Of, s.Processes, s.Members)
	}
	if s.Threads < s.Of {
		return fmt.Sprintf("%d of the target's %d threads were", s.Threads, s.Of)
	}
	if s.Of == 1 {
		return "the target (its one thread) was"
	}
	return fmt.Sprintf("the target (its %d threads) was", s.Of)
}

// By says who stopped it.
func (s Stops) By() string {
	switch s.State {
	case "t":
		return "by a tracer (ptrace: state t)"
	case "T and t":
		return "by a signal (state T) or a tracer (state t)"
	}
	return "by a signal (SIGSTOP or job control: state T)"
}

// StopWatch looks at a process's thread states (/proc/PID/task/TID/stat),
// or those of a set's processes, every StopLook from its own goroutine,
// for the commands that must not take a stopped target for an idle or
// waiting one. Price: one stat read per thread per look; nothing is
// stopped.
type StopWatch struct {
	fs   FS
	pid  int
	jc   bool // count job-control stops (T)
	tr   bool // count tracer stops (t)
	quit chan struct{}
	done chan struct{}

	pids func() []int // a set's processes now (nil: pid alone)

	mu     sync.Mutex
	all    stopAcct // the process, or the set as one
	each   map[int]*stopAcct
	period time.Duration // the longest time between two looks
}

// stopAcct is one account: a process's, or a set's.
type stopAcct struct {
	acct Stops
	last time.Time
	was  bool // the previous look saw a stopped thread
	seen map[string]bool
}

// WatchStops starts a StopWatch on pid and takes its first look now.
// tracer false leaves state t out: an observer that itself stops the
// target with ptrace (trace's ptrace engine) would otherwise count its own
// stops.
func WatchStops(fs FS, pid int, tracer bool) *StopWatch {
	return watch(fs, pid, nil, tracer)
}

// WatchStopsOf is WatchStops over a set: each look reads the threads of
// every process pids lists then (a member that exited is left out by
// pids, or found gone), with an account of the set and one per process
// (Each).
func WatchStopsOf(fs FS, pids func() []int, tracer bool) *StopWatch {
	return watch(fs, 0, pids, tracer)
}

func watch(fs FS, pid int, pids func() []int, tracer bool) *StopWatch {
	w := &StopWatch{fs: fs, pid: pid, pids: pids, jc: true, tr: tracer, quit: make(chan struct{}), done: make(chan struct{}),
		all: stopAcct{seen: map[string]bool{}}, each: map[int]*stopAcct{}}
	runtime.LockOSThread() // the first look's CPU time read on one thread
	next := w.timedLook()
	runtime.UnlockOSThread()
	go func() {
		defer close(w.done)
		runtime.LockOSThread() // its looks' CPU time is its thread's
		defer runtime.UnlockOSThread()
		t := time.NewTimer(next)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				t.Reset(w.timedLook())
			}
		}
	}()
	return w
}

// timedLook looks once and says when to look next: StopLook, or later
// when the look's CPU time was more than StopShare of that.
func (w *StopWatch) timedLook() time.Duration {
	c0 := clock.ThreadCPU()
	w.look()
	next := min(max(StopLook, time.Duration(float64(clock.ThreadCPU()-c0)/StopShare)), stopLookMax)
	w.mu.Lock()
	w.period = max(w.period, next)
	w.mu.Unlock()
	return next
}

// procLook is one process at one look.
type procLook struct {
	pid, n, of int
	jc, tr     bool // a thread seen in a job-control stop (T), in a tracer's (t)
	ok         bool // its threads listed (false: gone)
}

// look reads every thread's state once; the time since the previous look
// counts as stopped when that look saw a stopped thread.
func (w *StopWatch) look() {
	set := w.pids != nil
	pids := []int{w.pid}
	if set {
		pids = w.pids()
	}
	looks := make([]procLook, 0, len(pids))
	for _, pid := range pids {
		looks = append(looks, w.lookAt(pid))
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum procLook
	procs, members := 0, 0
	looked := make(map[int]bool, len(looks))
	for _, l := range looks {
		if looked[l.pid] {
			continue // listed twice: counted once
		}
		looked[l.pid] = true
		if !l.ok {
			if a := w.each[l.pid]; a != nil {
				a.add(now, l, 0, 0) // gone: its last interval closed
			}
			continue
		}
		members++
		sum.n += l.n
		sum.of += l.of
		sum.jc, sum.tr = sum.jc || l.jc, sum.tr || l.tr
		if l.n > 0 {
			procs++
		}
		if set {
			a := w.each[l.pid]
			if a == nil {
				a = &stopAcct{seen: map[string]bool{}}
				w.each[l.pid] = a
			}
			a.add(now, l, 0, 0)
		}
	}
	for pid, a := range w.each {
		if !looked[pid] {
			a.add(now, procLook{pid: pid}, 0, 0) // left the set (exited): its last interval closed
		}
	}
	sum.ok = members > 0
	if !set {
		procs, members = 0, 0 // one process: no set's words
	}
	w.all.add(now, sum, procs, members)
}

// lookAt reads pid's thread states.
func (w *StopWatch) lookAt(pid int) procLook {
	l := procLook{pid: pid}
	tids, err := w.fs.Tasks(pid)
	if err != nil {
		return l // exited: the caller notices
	}
	l.ok, l.of = true, len(tids)
	for _, tid := range tids {
		// The state letter alone, read into a buffer on the stack: a
		// look runs ten times a second for the whole session, and the
		// whole stat parsed was half of record's own CPU at 20 kHz.
		st, err := w.fs.stateLetter(pid, tid)
		if err != nil {
			continue
		}
		switch {
		case st == "T" && w.jc:
			l.n, l.jc = l.n+1, true
		case st == "t" && w.tr:
			l.n, l.tr = l.n+1, true
		}
	}
	return l
}

// add takes one look into the account: the time since the previous look
// counts as stopped when that look saw a stopped thread.
func (a *stopAcct) add(now time.Time, l procLook, procs, members int) {
	if a.was {
		a.acct.Seconds += now.Sub(a.last).Seconds()
	}
	a.last, a.was = now, false
	if !l.ok {
		return
	}
	if l.jc {
		a.seen["T"] = true
	}
	if l.tr {
		a.seen["t"] = true
	}
	if l.n > 0 {
		a.was = true
		if l.n > a.acct.Threads {
			a.acct.Threads, a.acct.Of = l.n, l.of
			a.acct.Processes, a.acct.Members = procs, members
		}
	}
}

// Seconds is how long the process (a set: any of its processes) was seen
// stopped so far (to the last look).
func (w *StopWatch) Seconds() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.acct.Seconds
}

// End stops the looks (one last one now) and returns the account, nil when
// no thread was seen stopped.
func (w *StopWatch) End() *Stops {
	close(w.quit)
	<-w.done
	w.look()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.final(w.period)
}

// Each is, after End, each process's own account of a set's watch: the
// processes seen with a stopped thread (none for a watch on one process).
func (w *StopWatch) Each() map[int]*Stops {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int]*Stops{}
	for pid, a := range w.each {
		if s := a.final(w.period); s != nil {
			out[pid] = s
		}
	}
	return out
}

func (a *stopAcct) final(period time.Duration) *Stops {
	if a.acct.Threads == 0 {
		return nil
	}
	s := a.acct
	s.Seconds = math.Round(s.Seconds*1000) / 1000
	s.LookMS = int(max(period, StopLook) / time.Millisecond)
	switch {
	case a.seen["T"] && a.seen["t"]:
		s.State = "T and t"
	case a.seen["t"]:
		s.State = "t"
	default:
		s.State = "T"
	}
	return &s
}
