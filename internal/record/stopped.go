package record

import (
	"fmt"
	"math"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procfs"
)

// stopLook is how often a recording reads its target's thread states.
const stopLook = 100 * time.Millisecond

// stopWatch looks at the target's thread states (/proc/PID/task/TID/stat)
// during a recording, from its own goroutine: a thread stopped by a
// signal or a tracer (T, t) runs nothing, so a cpu recording of it is
// empty — the footer and JSON must say why, not leave "0 samples" alone.
type stopWatch struct {
	fs   procfs.FS
	pid  int
	quit chan struct{}
	done chan struct{}
	acct flame.Stopped
	last time.Time
	was  bool // the previous look saw a stopped thread
	jc   bool // a job-control stop (T) seen
	tr   bool // a tracer's stop (t) seen
}

func startStopWatch(fs procfs.FS, pid int) *stopWatch {
	w := &stopWatch{fs: fs, pid: pid, quit: make(chan struct{}), done: make(chan struct{})}
	w.look()
	go func() {
		defer close(w.done)
		t := time.NewTicker(stopLook)
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
func (w *stopWatch) look() {
	now := time.Now()
	if w.was {
		w.acct.Seconds += now.Sub(w.last).Seconds()
	}
	w.last, w.was = now, false
	tids, err := w.fs.Tasks(w.pid)
	if err != nil {
		return // exited: the recording notices
	}
	n := 0
	for _, tid := range tids {
		st, err := w.fs.TaskStat(w.pid, tid)
		if err != nil {
			continue
		}
		switch st.State {
		case "T":
			w.jc = true
		case "t":
			w.tr = true
		default:
			continue
		}
		n++
	}
	if n > 0 {
		w.was = true
		if n > w.acct.Threads {
			w.acct.Threads, w.acct.Of = n, len(tids)
		}
	}
}

// end stops the looks (one last one now) and returns the account, nil
// when no thread was seen stopped.
func (w *stopWatch) end() *flame.Stopped {
	close(w.quit)
	<-w.done
	w.look()
	if w.acct.Threads == 0 {
		return nil
	}
	a := w.acct
	a.Seconds = math.Round(a.Seconds*1000) / 1000
	a.LookMS = int(stopLook / time.Millisecond)
	switch {
	case w.jc && w.tr:
		a.State = "T and t"
	case w.tr:
		a.State = "t"
	default:
		a.State = "T"
	}
	return &a
}

// stoppedNote is the footer's sentence about a stopped target, "" when no
// thread was seen stopped.
func stoppedNote(m flame.Meta) string {
	s := m.Stopped
	if s == nil {
		return ""
	}
	who := fmt.Sprintf("the target (its %d threads) was", s.Of)
	if s.Threads < s.Of {
		who = fmt.Sprintf("%d of the target's %d threads were", s.Threads, s.Of)
	}
	why := "by a signal (SIGSTOP or job control: state T)"
	switch s.State {
	case "t":
		why = "by a tracer (ptrace: state t)"
	case "T and t":
		why = "by a signal (state T) or a tracer (state t)"
	}
	return fmt.Sprintf("; %s stopped %s for about %.1fs of the recording (seen at looks every %d ms): a stopped thread runs nothing and is not sampled",
		who, why, s.Seconds, s.LookMS)
}
