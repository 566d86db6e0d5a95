package trace

import (
	"fmt"
	"io"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// sites is the state both engines share while a trace runs (all on the
// tracer's thread): the filter, the aggregate, the log and the reader of
// Python sites.
type sites struct {
	pid       int
	statsNote string // the BPF run-time stats' state (bpfload.EnableRunStats)
	sess      *session.Session
	tids      *session.TidMap
	tidsAt    time.Time
	lastTry   time.Time
	filter    map[int]bool
	slow      time.Duration
	slowSet   bool
	agg       *Agg
	logw      io.Writer
	mem       *pyframes.ProcessMemory
	siteTried uint64
	siteFail  uint64
	restarts  uint64
	// firstSiteErr: why the first failed site read failed.
	firstSiteErr string
	// walkLayout: the kernel walker's layout (tracepoint engine with the
	// walk); heldFrom: a held command's, where it was read (kwalk.LayoutRead).
	walkLayout *pyframes.KernelLayout
	heldFrom   string
	// noPy: -p names a process whose interpreter cannot be read (not
	// Python, or why not): its calls are counted, never named.
	noPy string
	// lastWhy: why the last stack read found no frame, in a few words.
	lastWhy string
	// set: a set of processes is observed (tracepoint: counts per
	// process, and Python sites through members.go when walked); held:
	// sess is a command held before its exec.
	set, held bool
}

// siteErr keeps the first reason a site read failed, for the JSON.
func (r *sites) siteErr(format string, a ...any) {
	if r.firstSiteErr == "" {
		r.firstSiteErr = fmt.Sprintf(format, a...)
	}
}

// site reads the Python stack of tid now (innermost first); nil when it
// cannot.
func (r *sites) site(tid int) []Site {
	frames := r.stack(tid)
	if len(frames) == 0 {
		return nil
	}
	out := make([]Site, len(frames))
	for i, f := range frames {
		out[i] = Site{Function: f.Function, File: f.File, Line: f.Line}
	}
	return out
}

// innermost is the innermost frame of tid's stack now; nil when it cannot
// be read.
func (r *sites) innermost(tid int) *Site {
	frames := r.stack(tid)
	if len(frames) == 0 {
		return nil
	}
	return &Site{Function: frames[0].Function, File: frames[0].File, Line: frames[0].Line}
}

// stack reads tid's Python frames now (innermost first), keeping the
// first reason a read failed; nil when it cannot, and lastWhy says why in
// a few words.
func (r *sites) stack(tid int) []pyframes.Frame {
	r.lastWhy = ""
	if r.noPy != "" {
		r.lastWhy = whyNotPython
		r.siteErr("%s", r.noPy)
		return nil
	}
	if r.sess == nil {
		r.lastWhy = "interpreter not read yet"
		if time.Since(r.lastTry) < 5*time.Millisecond {
			return nil
		}
		r.lastTry = time.Now()
		s, err := session.Attach(r.pid)
		if err != nil {
			r.siteErr("pid %d: its interpreter not read yet: %v", r.pid, err)
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
		r.lastWhy = "no Python thread state"
		r.siteErr("tid %d has no Python thread state", tid)
		return nil
	}
	frames, _, _, err := r.sess.Py.Stack(ref.Addr, pyframes.Options{Retries: 1})
	if err != nil {
		r.lastWhy = "stack read failed"
		r.siteErr("tid %d: %v", tid, err)
		return nil
	}
	if len(frames) == 0 {
		r.lastWhy = "no Python frame at the call"
	}
	return frames
}

// whyNotPython is the no-site class of a process that is not Python.
const whyNotPython = "not Python"
