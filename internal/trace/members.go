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
	target pyframes.Version       // the target's version; zero until its interpreter is read
	late   bool                   // held: the addresses are not written yet
	procs  map[int]*member
	// refresh: the kernel's thread map was last filled then; stale: a
	// call came from a thread it did not know.
	refresh time.Time
	stale   bool
	// lateWhy: the held command's walk could not be turned on (another
	// build came up, no interpreter read): why.
	lateWhy string
	// pending: a member's interpreter could not be read yet (starting):
	// the engine looks again after startLook, not its usual period.
	pending bool
}

// startLook is the look period while an interpreter is starting: a held
// command's calls are counted, not named, until its addresses are written;
// an exec'd member's are walked with the target's addresses, and fail the
// walk's checks, until its own are in the kernel's map.
const startLook = 5 * time.Millisecond

// member is one process: its reader (kwalk.OpenMember), or why not.
type member struct {
	kwalk.Member
	execs int       // its execs when it was opened
	retry time.Time // not readable yet (starting): try again after this
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

func newMembers(run *sites, tp *tracepoint.Tracer, layout *pyframes.KernelLayout) *members {
	ms := &members{run: run, tp: tp, layout: layout, late: tp.AddrsLate(), procs: map[int]*member{}}
	// A fork or an exec ends the engine's wait at once: the new program
	// is read while it starts.
	tp.Set.OnChange(tp.Wake)
	if s := run.sess; !ms.late && s.Py != nil {
		ms.target = s.Py.Version()
		ms.procs[s.Pid] = &member{Member: kwalk.Member{Py: s.Py, Sym: kwalk.NewSymbolizer(s.Py, layout), Python: ms.target.String()}}
	}
	return ms
}

// tick does what is due: the held command's addresses once its
// interpreter is up, the members not read yet, the thread map.
func (ms *members) tick() {
	if ms.late && ms.lateWhy == "" {
		ms.configureLate()
	}
	if ms.target == (pyframes.Version{}) {
		return
	}
	ms.pending = false
	for _, m := range ms.tp.Set.Members() {
		p := ms.procs[m.Pid]
		switch {
		case !m.Exited:
			if ms.proc(m.Pid).Retry {
				ms.pending = true
			}
		case p != nil && p.Py != nil && m.Pid != ms.run.sess.Pid:
			// Its stacks were drained before this look: its reader
			// and addresses are no longer needed.
			_ = ms.tp.PyAddrs.Delete(uint32(m.Pid))
			p.Py, p.Sym = nil, nil
			p.Refused = "exited"
		}
	}
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
	ms.late, ms.target = false, s.Py.Version()
	ms.procs[s.Pid] = &member{Member: kwalk.Member{Py: s.Py, Sym: kwalk.NewSymbolizer(s.Py, kl), Python: ms.target.String()}}
	if m, ok := ms.tp.Set.Member(s.Pid); ok {
		ms.procs[s.Pid].execs = m.Execs
	}
	ms.fillThreads()
}

// proc is pid's member, opened (or refused) now if it was not, or if it
// has exec'd since.
func (ms *members) proc(pid int) *member {
	p := ms.procs[pid]
	m, known := ms.tp.Set.Member(pid)
	switch {
	case p == nil:
	case known && m.Execs != p.execs && pid != ms.run.sess.Pid:
		// A new program: its own memory and maybe interpreter.
		_ = ms.tp.PyAddrs.Delete(uint32(pid))
		p = nil
	case !p.retry.IsZero() && time.Now().After(p.retry):
		p = nil
	}
	if p != nil {
		return p
	}
	if ms.target == (pyframes.Version{}) {
		return &member{Member: kwalk.Member{Refused: "the target's interpreter is not read yet"}}
	}
	put := func(pid int, l *pyframes.KernelLayout) error { return kwalk.PutAddrs(ms.tp.PyAddrs, pid, l) }
	p = &member{Member: kwalk.OpenMember(pid, ms.target, ms.layout, true, ms.tp.Set.Starting(pid), put, ms.tp.Set.Gone), execs: m.Execs}
	if p.Retry {
		p.retry = time.Now().Add(startLook)
	}
	ms.procs[pid] = p
	return p
}

// symbolizer is the reader of the process that sent a stack (nil: why).
func (ms *members) symbolizer(tgid int) (*kwalk.Symbolizer, string) {
	p := ms.proc(tgid)
	if p.Sym == nil {
		why := p.Refused
		if why == "" {
			why = "not read"
		}
		return nil, why
	}
	return p.Sym, ""
}

// fillThreads makes the kernel's thread map every walked member's threads.
func (ms *members) fillThreads() {
	ms.refresh, ms.stale = time.Now(), false
	var refs []pyframes.ThreadRef
	for pid, p := range ms.procs {
		if p.Sym == nil || ms.tp.Set.Gone(pid) {
			continue
		}
		if more, err := p.Py.ThreadRefs(); err == nil {
			refs = append(refs, more...)
		}
	}
	if err := kwalk.FillThreads(ms.tp.Tstates, ms.run.pid, refs); err != nil {
		ms.run.siteErr("%v", err)
	}
}
