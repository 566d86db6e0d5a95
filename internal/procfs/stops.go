package procfs

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// StopLook is how often a StopWatch reads its target's thread states.
const StopLook = 100 * time.Millisecond

// Stops says that threads of a process were seen stopped by someone else —
// a job-control stop (SIGSTOP, SIGTSTP, …: state T) or a tracer's stop
// (state t) — at some of a StopWatch's looks. A stopped thread runs
// nothing: a window over it is empty or thin for that reason, not because
// the program was idle or waiting.
type Stops struct {
	Threads int `json:"threads"` // the most threads seen stopped at one look
	Of      int `json:"of"`      // the threads the process had at that look
	// Seconds: how long at least one thread was seen stopped, to a look's
	// period (LookMS).
	Seconds float64 `json:"seconds"`
	State   string  `json:"state"` // "T" (job control), "t" (tracer) or "T and t"
	LookMS  int     `json:"look_ms"`
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
// threads) was" or "1 of the target's 3 threads were".
func (s Stops) Who() string {
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

// StopWatch looks at a process's thread states (/proc/PID/task/TID/stat)
// every StopLook from its own goroutine, for the commands that must not
// take a stopped target for an idle or waiting one. Price: one stat read
// per thread per look; nothing is stopped.
type StopWatch struct {
	fs   FS
	pid  int
	jc   bool // count job-control stops (T)
	tr   bool // count tracer stops (t)
	quit chan struct{}
	done chan struct{}

	mu   sync.Mutex
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
	w := &StopWatch{fs: fs, pid: pid, jc: true, tr: tracer, quit: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	w.look()
	go func() {
		defer close(w.done)
		t := time.NewTicker(StopLook)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				w.look()
			}
		}
	}()
	return w
}

// look reads every thread's state once; the time since the previous look
// counts as stopped when that look saw a stopped thread.
func (w *StopWatch) look() {
	tids, err := w.fs.Tasks(w.pid)
	n := 0
	var states []string
	for _, tid := range tids {
		// The state letter alone, read into a buffer on the stack: a
		// look runs ten times a second for the whole session, and the
		// whole stat parsed was half of record's own CPU at 20 kHz.
		st, err := w.fs.stateLetter(w.pid, tid)
		if err != nil {
			continue
		}
		if (st == "T" && w.jc) || (st == "t" && w.tr) {
			n++
			states = append(states, st)
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.was {
		w.acct.Seconds += now.Sub(w.last).Seconds()
	}
	w.last, w.was = now, false
	if err != nil {
		return // exited: the caller notices
	}
	for _, s := range states {
		w.seen[s] = true
	}
	if n > 0 {
		w.was = true
		if n > w.acct.Threads {
			w.acct.Threads, w.acct.Of = n, len(tids)
		}
	}
}

// Seconds is how long the process was seen stopped so far (to the last look).
func (w *StopWatch) Seconds() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acct.Seconds
}

// End stops the looks (one last one now) and returns the account, nil when
// no thread was seen stopped.
func (w *StopWatch) End() *Stops {
	close(w.quit)
	<-w.done
	w.look()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acct.Threads == 0 {
		return nil
	}
	a := w.acct
	a.Seconds = math.Round(a.Seconds*1000) / 1000
	a.LookMS = int(StopLook / time.Millisecond)
	switch {
	case w.seen["T"] && w.seen["t"]:
		a.State = "T and t"
	case w.seen["t"]:
		a.State = "t"
	default:
		a.State = "T"
	}
	return &a
}
