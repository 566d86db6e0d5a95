//go:build amd64

package trace

import (
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

// members walks the Python stacks of a set's processes (or of a command
// held before its exec): the programs walk every member with the target's
// layout; a member of the target's build mapped elsewhere (an exec'd
// interpreter: ASLR) gets its own addresses in the programs' pyaddrs map,
// one of another build is refused (its calls are counted, not named).
// Each member's code objects are read through its own reader, opened as
// soon as it can be read: a forked child's walks are valid from its
// fork, an exec'd one's once its addresses are in the map (until then
// they fail the walk's checks: counted invalid, never guessed). A held
// command's programs were loaded with the layout of its files; its
// addresses are written once its interpreter is up (calls before that
// are counted in BeforeWalk).
type members struct {
	run    *sites
	tp     *tracepoint.Tracer
	layout *pyframes.KernelLayout // the walk's: the target's, or read from the held command's files
	late   bool                   // held: the addresses are not written yet
	set    *kwalk.Members
	// refresh: the kernel's thread map was last filled then; stale: a
	// call came from a thread it did not know.
	refresh time.Time
	stale   bool
	// lateWhy: the held command's walk could not be turned on (another
	// build came up, no interpreter read): why.
	lateWhy string
	// pending: a member's interpreter, or the held command's, could not
	// be read yet while it starts: the engine looks again after
	// startLook, not its usual period.
	pending bool
}

// startLook is the look period while an interpreter is starting: a held
// command's calls are counted, not named, until its addresses are written;
// an exec'd member's are walked with the target's addresses, and fail the
// walk's checks, until its own are in the kernel's map.
const startLook = kwalk.RetryLook

func newMembers(run *sites, tp *tracepoint.Tracer, layout *pyframes.KernelLayout) *members {
	ms := &members{run: run, tp: tp, layout: layout, late: tp.AddrsLate(), set: kwalk.NewMembers(tp.Set, tp.PyAddrs, layout)}
	if s := run.sess; !ms.late && s.Py != nil {
		ms.set.Add(s.Pid, s.Py, kwalk.NewSymbolizer(s.Py, layout))
	}
	// A fork or an exec ends the engine's wait at once: the new program
	// is read while it starts.
	tp.Set.OnChange(tp.Wake)
	return ms
}

// setWalk configures the walk of a set or a held command (cfg.Walk, and
// cfg.Late for a held one), or says why its calls are counted only.
func (r *sites) setWalk(cfg *tracepoint.Config) string {
	if r.held {
		kl, path, err := r.sess.HeldLayout()
		if err != nil {
			return "counts only: the command's files name no interpreter to walk before its exec (" + err.Error() + ")"
		}
		w, err := kwalk.ProgramConfig(r.pid, kl, kwalk.MaxFrames, nil)
		if err != nil {
			return "counts only: " + err.Error()
		}
		cfg.Walk, cfg.Late, r.walkLayout, r.heldFrom = w, true, kl, kwalk.LayoutRead(path)
		return ""
	}
	w, kl, why := walkConfig(r.sess)
	if w == nil {
		return "counts only: " + why
	}
	cfg.Walk, r.walkLayout = w, kl
	// The thread-list look-up of threads not mapped yet (the target's
	// _PyRuntime; forked members share it, syscalls.bpf.c).
	cfg.Py = tracepoint.OffsetsFor(r.sess.Py.Layout).WithRuntime(r.sess.Py.Info.Runtime)
	return ""
}

// tick does what is due: the held command's addresses once its
// interpreter is up, the members not read yet, the thread map.
func (ms *members) tick() {
	if ms.late && ms.lateWhy == "" {
		ms.configureLate()
	}
	ms.set.Open()
	// Looked at often only while a program starts: a held command that
	// is not Python (yet) 2 s after its exec is looked at as usual.
	ms.pending = ms.set.Pending || ms.late && ms.lateWhy == "" && ms.tp.Set.Starting(ms.run.pid)
	if (ms.stale && time.Since(ms.refresh) > 5*time.Millisecond) || time.Since(ms.refresh) > 250*time.Millisecond {
		ms.fillThreads()
	}
}

// configureLate gives the held command's programs its addresses once its
// interpreter can be read, after checking that it is the build the
// programs were loaded for.
func (ms *members) configureLate() {
	s := ms.run.sess
	if !s.TryPython() {
		return // not up yet (or not Python: its calls stay counted only)
	}
	walk, kl, why := walkConfig(s)
	if walk == nil {
		ms.lateWhy = why
		return
	}
	if err := kwalk.CheckBuild(s.Pid, ms.layout, kl); err != nil {
		ms.lateWhy = err.Error()
		return
	}
	a := kwalk.LateAddrs(walk)
	if err := ms.tp.SetAddrs(a, kwalk.LateReady(a)); err != nil {
		ms.lateWhy = fmt.Sprintf("pid %d: %v", s.Pid, err)
		return
	}
	ms.late = false
	ms.set.Add(s.Pid, s.Py, kwalk.NewSymbolizer(s.Py, kl))
	ms.fillThreads()
}

// notWalked says why pid's stacks are not walked for good (not Python,
// another build, exited; "": walked, or starting).
func (ms *members) notWalked(pid int) string {
	if m := ms.set.Get(pid); m.Sym == nil && !m.Retry {
		return m.Why()
	}
	return ""
}

// symbolizer is the reader of the process that sent a stack (nil: why).
func (ms *members) symbolizer(tgid int) (*kwalk.Symbolizer, string) { return ms.set.Symbolizer(tgid) }

// fillThreads makes the kernel's thread map every walked member's threads.
func (ms *members) fillThreads() {
	ms.refresh, ms.stale = time.Now(), false
	refs := ms.set.ThreadRefs()
	if s := ms.run.sess; !ms.late && s.Py != nil && ms.set.Seed() == s.Pid {
		if own, err := s.Py.ThreadRefs(); err == nil {
			refs = append(refs, own...)
		}
	}
	if err := kwalk.FillThreads(ms.tp.Tstates, ms.run.pid, refs); err != nil {
		ms.run.siteErr("%v", err)
	}
}
