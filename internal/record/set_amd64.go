//go:build amd64

package record

import (
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// procRec is one member process of a recorded set: its code-object reader
// (opened at its first sample), the frames interned for it, its numbers.
type procRec struct {
	pid     int
	opened  bool
	py      *pyframes.Process
	sym     *kwalk.Symbolizer
	ids     map[[2]uint64]int // (code object as read, lasti) -> interned frame
	root    int               // its "[pid N] argv" frame, -1 until interned
	refused string            // why its stacks are not walked ("" : walked)
	addrs   bool              // walked with its own addresses (pyaddrs)
	python  string
	samples uint64
	execs   int       // the member's execs when it was opened
	retry   time.Time // a read that failed for now: try again after this
	cpu0    float64   // CPU seconds at its first reading (0 for a fork: it starts at 0)
	cpu     float64   // the last reading
	readCPU bool
}

// pendingLook is the look period while a member's interpreter is still
// starting: its samples are invalid until its addresses are in the
// kernel's map.
const pendingLook = 20 * time.Millisecond

// maxOpenProcs bounds the member processes whose code-object readers are
// kept open; past it, the readers of exited members are dropped.
const maxOpenProcs = 64

// setRec is the bpf engine's state for a set.
type setRec struct {
	set    *procset.Set
	w      *kwalk.Walker
	layout *pyframes.KernelLayout // the target's: a member of another layout is refused
	procs  map[int]*procRec
	open   int
	unread uint64 // samples of members that exited before their code objects were read
}

func newSetRec(k *kernelRec, r *Recorder, kl *pyframes.KernelLayout) *setRec {
	sr := &setRec{set: k.w.Set, w: k.w, layout: kl, procs: map[int]*procRec{}}
	// The target is read through the session's own reader.
	sr.procs[r.s.Pid] = &procRec{pid: r.s.Pid, opened: true, py: r.s.Py, sym: k.sym, ids: k.ids, root: -1,
		python: r.s.Py.Version().String(), cpu0: targetCPU(r.s.Pid)}
	sr.open = 1
	// A fork or an exec wakes the look at once: an exec'd interpreter's
	// samples are invalid until its addresses are in the kernel's map.
	sr.set.OnChange(k.w.Wake)
	return sr
}

// proc is pid's record, its reader opened (or refused) at the first call.
func (sr *setRec) proc(r *Recorder, pid int) *procRec {
	p := sr.procs[pid]
	if p == nil {
		p = &procRec{pid: pid, root: -1}
		if m, ok := sr.set.Member(pid); !ok || m.How != procset.Fork {
			p.cpu0 = targetCPU(pid)
		}
		sr.procs[pid] = p
	}
	if p.opened && pid != r.s.Pid {
		m, _ := sr.set.Member(pid)
		switch {
		case m.Execs != p.execs:
			// A new program (python exec'd by a forked child): its own
			// memory, argv and maybe interpreter.
			sr.close(p)
			p.opened, p.root, p.refused = false, -1, ""
		case !p.retry.IsZero() && time.Now().After(p.retry):
			p.opened, p.refused = false, ""
		}
	}
	if !p.opened {
		p.opened = true
		m, _ := sr.set.Member(pid)
		p.execs = m.Execs
		sr.openProc(r, p)
	}
	return p
}

// openPending opens the members not read yet (a spawned worker's
// exec'd interpreter, a cgroup's process), so that the kernel walks each
// with its own addresses as soon as it can be read, not only once a drain
// brings its first (until then invalid) samples; it reports whether one
// could not be read yet (its interpreter still starting).
func (sr *setRec) openPending(r *Recorder) bool {
	pending := false
	now := time.Now()
	for _, m := range sr.set.Members() {
		if m.Pid == r.s.Pid || sr.gone(m.Pid) {
			continue
		}
		p := sr.procs[m.Pid]
		switch {
		case p != nil && p.opened && p.retry.IsZero() && m.Execs == p.execs:
			continue // read (or refused for good)
		case p != nil && !p.retry.IsZero() && now.Before(p.retry):
			pending = true
			continue
		}
		if p = sr.proc(r, m.Pid); !p.retry.IsZero() {
			pending = true
		}
	}
	return pending
}

func (sr *setRec) close(p *procRec) {
	if p.py != nil {
		sr.open--
	}
	if p.addrs {
		sr.w.ClearAddrs(p.pid)
		p.addrs = false
	}
	p.py, p.sym = nil, nil
}

// openProc opens p's interpreter and checks that the kernel's walk (the
// target's layout and addresses) fits it.
func (sr *setRec) openProc(r *Recorder, p *procRec) {
	p.retry = time.Time{}
	m := kwalk.OpenMember(p.pid, r.s.Py.Version(), sr.layout, true, sr.set.Starting(p.pid), sr.w.SetAddrs, sr.gone)
	switch {
	case m.Gone:
		// Exited before its code objects could be read: its samples are
		// folded as [unreadable: process exited], counted.
		return
	case m.Retry:
		p.refused, p.retry = m.Refused, time.Now().Add(pendingLook)
		return
	}
	p.python, p.refused, p.addrs = m.Python, m.Refused, m.Addrs
	if m.Refused != "" {
		return
	}
	p.py, p.sym, p.ids = m.Py, m.Sym, map[[2]uint64]int{}
	sr.open++
	if sr.open > maxOpenProcs {
		sr.dropExited(r.s.Pid)
	}
}

// dropExited forgets the code-object readers of exited members.
func (sr *setRec) dropExited(target int) {
	for pid, p := range sr.procs {
		if pid != target && p.py != nil && sr.gone(pid) {
			sr.close(p)
		}
	}
}

// gone reports whether pid has exited (or is a zombie: nothing to read).
func (sr *setRec) gone(pid int) bool { return sr.set.Gone(pid) }

// rootFrame is p's "[pid N] argv" frame.
func (sr *setRec) rootFrame(r *Recorder, p *procRec) int {
	if p.root < 0 {
		m, _ := sr.set.Member(p.pid)
		p.root = r.prof.Intern(flame.ProcessFrame(procset.Label(p.pid, m.Argv)))
	}
	return p.root
}

// threadRefs are the thread states of every walked member (for the
// kernel's map: threads its TLS look-up does not find).
func (sr *setRec) threadRefs(target []pyframes.ThreadRef, targetPid int) []pyframes.ThreadRef {
	refs := append([]pyframes.ThreadRef(nil), target...)
	for pid, p := range sr.procs {
		if pid == targetPid || p.py == nil || p.refused != "" {
			continue
		}
		if more, err := p.py.ThreadRefs(); err == nil {
			refs = append(refs, more...)
		}
	}
	return refs
}

// cpu reads each member's CPU seconds (the last reading of an exited one
// stays) and returns their sum since each was first read.
func (sr *setRec) cpuSum() float64 {
	for _, m := range sr.set.Members() {
		p := sr.procs[m.Pid]
		if p == nil {
			p = &procRec{pid: m.Pid, root: -1}
			if m.How != procset.Fork {
				p.cpu0 = targetCPU(m.Pid)
			}
			sr.procs[m.Pid] = p
		}
		if c := targetCPU(m.Pid); c > p.cpu {
			p.cpu = c
			p.readCPU = true
		}
		if m.Exited && p.addrs {
			sr.w.ClearAddrs(m.Pid) // its number may come back as another process
			p.addrs = false
		}
	}
	sum := 0.0
	for _, p := range sr.procs {
		if p.readCPU && p.cpu > p.cpu0 {
			sum += p.cpu - p.cpu0
		}
	}
	return sum
}

// account is the set's account at the end.
func (sr *setRec) account() *SetAccount {
	st := sr.set.Stats()
	a := &SetAccount{Counts: SetCounts{Counts: procset.CountsOf(st), Unreadable: sr.unread}}
	for _, m := range sr.set.Members() {
		pa := ProcessAccount{Account: procset.AccountOf(m)}
		if p := sr.procs[m.Pid]; p != nil {
			pa.Samples, pa.Python, pa.Refused = p.samples, p.python, p.refused
			if p.readCPU && p.cpu > p.cpu0 {
				pa.CPUS = p.cpu - p.cpu0
			}
			if p.refused != "" {
				a.Counts.Refused++
			}
		}
		a.Processes = append(a.Processes, pa)
	}
	return a
}

// tick hands one clock reading to every open member's symbolizer.
func (sr *setRec) tick(now time.Time) {
	for _, p := range sr.procs {
		if p.sym != nil {
			p.sym.Tick(now)
		}
	}
}
