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
// addresses are written once its interpreter is up. When its files name
// no interpreter (a script, a shim that execs one), the programs were
// loaded without a layout: the whole walk is written once the first of
// its processes comes up Python (the command itself after an exec, or a
// child it runs), and that process is the target the others are checked
// against. Calls before the walk is on are counted in BeforeWalk.
type members struct {
	run    *sites
	tp     *tracepoint.Tracer
	layout *pyframes.KernelLayout // the walk's: the target's, or read from the held command's files (nil: not known yet)
	late   bool                   // held: the addresses (or the whole walk) are not written yet
	set    *kwalk.Members
	// seedPid and seedPy: the target Added to set and its reader (the
	// session's, or a held command's child that came up Python first).
	seedPid int
	seedPy  *pyframes.Process
	// notPy: held, no layout yet: processes read and found not Python
	// for good (past their start), by when their program began.
	notPy map[int]uint64
	// starting: held, not walked yet: a process that may still come up
	// Python began a moment ago.
	starting bool
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
	ms := &members{run: run, tp: tp, layout: layout, late: tp.AddrsLate() || tp.WalkLate(),
		set: kwalk.NewMembers(tp.Set, tp.PyAddrs, layout), notPy: map[int]uint64{}}
	if s := run.sess; !ms.late && s.Py != nil {
		ms.adopt(s.Pid, s.Py, layout)
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
		var w any
		if err == nil {
			w, err = kwalk.ProgramConfig(r.pid, kl, kwalk.MaxFrames, nil)
		}
		if err != nil {
			// No interpreter named by the command's files (a shell
			// script, a shim that execs one): the programs take the
			// whole walk once one of its processes is Python.
			cfg.Walk, cfg.Late = nil, true
			r.layoutOnceUp("the command's files: " + err.Error())
			return ""
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

// layoutOnceUp: the held command's walk takes its layout from the first
// of its processes to come up Python, not its files (why).
func (r *sites) layoutOnceUp(why string) {
	r.walkLayout, r.heldFrom = nil, kwalk.LayoutOnceUp(why)
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
	ms.pending = ms.set.Pending || ms.late && ms.lateWhy == "" && ms.starting
	if (ms.stale && time.Since(ms.refresh) > 5*time.Millisecond) || time.Since(ms.refresh) > 250*time.Millisecond {
		ms.fillThreads()
	}
}

// configureLate gives the held command's programs its addresses once its
// interpreter can be read, after checking that it is the build the
// programs were loaded for.
func (ms *members) configureLate() {
	if ms.tp.WalkLate() {
		ms.configureHeld()
		return
	}
	s := ms.run.sess
	ms.starting = ms.tp.Set.Starting(s.Pid)
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
	ms.adopt(s.Pid, s.Py, kl)
	ms.fillThreads()
}

// configureHeld gives programs loaded without a layout the whole walk of
// the first of the held command's processes whose interpreter is up.
func (ms *members) configureHeld() {
	pid, py := ms.firstPython()
	if py == nil {
		return
	}
	walk, kl, why := procWalkConfig(pid, py)
	if walk == nil {
		ms.lateWhy = fmt.Sprintf("pid %d: %s", pid, why)
		return
	}
	if err := ms.tp.SetWalk(kwalk.Dormant(walk), walk); err != nil {
		ms.lateWhy = fmt.Sprintf("pid %d: %v", pid, err)
		return
	}
	// Its addresses are the programs': the others of its build get
	// their own in pyaddrs, as a set's members do.
	ms.layout, ms.run.walkLayout = kl, kl
	ms.set = kwalk.NewMembers(ms.tp.Set, ms.tp.PyAddrs, kl)
	ms.adopt(pid, py, kl)
	ms.fillThreads()
}

// firstPython is the held command itself once its interpreter can be
// read, else the first live process of its set whose interpreter can
// (a python it ran); nil while none can. A process found not Python
// past its start is not read again until it runs another program.
func (ms *members) firstPython() (int, *pyframes.Process) {
	s := ms.run.sess
	set := ms.tp.Set
	ms.starting = false
	var pids []int
	for _, m := range set.Members() {
		if b, ok := ms.notPy[m.Pid]; m.Exited || ok && b == m.Began {
			continue
		}
		pids = append(pids, m.Pid)
	}
	for _, pid := range pids {
		var py *pyframes.Process
		if pid == s.Pid {
			if s.TryPython() {
				py = s.Py
			}
		} else if p, err := pyframes.Open(pid); err == nil {
			py = p
		}
		if py != nil {
			return pid, py
		}
		m, _ := set.Member(pid)
		if set.Starting(pid) {
			ms.starting = true
		} else {
			ms.notPy[pid] = m.Began
		}
	}
	return 0, nil
}

// adopt makes pid (read through py, walked with layout kl) the target of
// the walk: the one the set's members are checked against.
func (ms *members) adopt(pid int, py *pyframes.Process, kl *pyframes.KernelLayout) {
	ms.late, ms.seedPid, ms.seedPy = false, pid, py
	ms.set.Add(pid, py, kwalk.NewSymbolizer(py, kl))
}

// notWalked says why pid's stacks are not walked for good (not Python,
// another build, exited; "": walked, or starting).
func (ms *members) notWalked(pid int) string {
	if m := ms.set.Get(pid); m.Sym == nil && !m.Retry {
		return m.Why()
	}
	return ""
}

// unready says whether pid's call at mono ns t was walked before its own
// addresses were in the kernel (kwalk.Members.Unready).
func (ms *members) unready(pid int, t int64) bool { return ms.set.Unready(pid, t) }

// symbolizer is the reader of the process that sent a stack (nil: why).
func (ms *members) symbolizer(tgid int) (*kwalk.Symbolizer, string) { return ms.set.Symbolizer(tgid) }

// fillThreads makes the kernel's thread map every walked member's threads.
func (ms *members) fillThreads() {
	ms.refresh, ms.stale = time.Now(), false
	refs := ms.set.ThreadRefs()
	if !ms.late && ms.seedPy != nil && ms.set.Seed() == ms.seedPid {
		if own, err := ms.seedPy.ThreadRefs(); err == nil {
			refs = append(refs, own...)
		}
	}
	if err := kwalk.FillThreads(ms.tp.Tstates, ms.run.pid, refs); err != nil {
		ms.run.siteErr("%v", err)
	}
}
