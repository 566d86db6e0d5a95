//go:build amd64

package offcpu

import (
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// offProc is one member process of an observed set: its code-object
// reader (opened at its first Python stack), its root frame.
type offProc struct {
	pid      int
	opened   bool
	py       *pyframes.Process
	sym      *kwalk.Symbolizer
	frameIDs map[[2]uint64]int // (code object, line) -> interned frame, per process
	root     int               // its "[pid N] argv" frame, -1 until interned
	refused  string
	python   string
	addrs    bool // walked with its own addresses (pyaddrs)
	execs    int
	retry    time.Time
}

// maxOpenProcs bounds the members whose interpreters are kept open; past
// it, the readers of exited members are dropped.
const maxOpenProcs = 64

// offSet is the bpf engine's state for a set of processes.
type offSet struct {
	set    *procset.Set
	layout *pyframes.KernelLayout // the target's: a member of another layout is refused
	procs  map[int]*offProc
	pidOf  map[int]int // tid -> its process
	open   int
}

func (e *bpfEngine) newSet(set *procset.Set, kl *pyframes.KernelLayout) {
	so := &offSet{set: set, layout: kl, procs: map[int]*offProc{}, pidOf: map[int]int{}}
	t := &offProc{pid: e.s.Pid, opened: true, py: e.s.Py, frameIDs: e.frameIDs, root: -1, python: e.s.Py.Version().String()}
	if e.kp != nil {
		t.sym = e.kp.sym
	}
	so.procs[e.s.Pid] = t
	so.open = 1
	e.set = so
}

// members are the set's live processes (the target alone without a set).
func (e *bpfEngine) members() []int {
	if e.set == nil {
		return []int{e.s.Pid}
	}
	var out []int
	for _, m := range e.set.set.Members() {
		if !m.Exited {
			out = append(out, m.Pid)
		}
	}
	return out
}

// memberTasks lists the threads of every live member, noting each one's
// process; fn is called per thread.
func (e *bpfEngine) memberTasks(fn func(pid, tid int)) error {
	var first error
	for _, pid := range e.members() {
		tids, err := e.s.FS.Tasks(pid)
		if err != nil {
			if first == nil && pid == e.s.Pid {
				first = err
			}
			continue
		}
		for _, tid := range tids {
			if e.set != nil {
				e.set.pidOf[tid] = pid
			}
			fn(pid, tid)
		}
	}
	return first
}

// pidOfTid is the process of a thread (the target's when unknown).
func (e *bpfEngine) pidOfTid(tid int) int {
	if e.set == nil {
		return e.s.Pid
	}
	if p, ok := e.set.pidOf[tid]; ok {
		return p
	}
	if st, err := procfs.Default().Status(tid); err == nil && st.Tgid > 0 {
		e.set.pidOf[tid] = st.Tgid
		return st.Tgid
	}
	return 0
}

// proc is pid's record, its reader opened (or refused) at the first call.
func (e *bpfEngine) proc(pid int) *offProc {
	so := e.set
	p := so.procs[pid]
	if p == nil {
		p = &offProc{pid: pid, root: -1}
		so.procs[pid] = p
	}
	if p.opened && pid != e.s.Pid {
		m, _ := so.set.Member(pid)
		switch {
		case m.Execs != p.execs:
			// A new program: its own memory, argv, maybe interpreter.
			e.closeProc(p)
			p.opened, p.root, p.refused = false, -1, ""
		case !p.retry.IsZero() && time.Now().After(p.retry):
			p.opened, p.refused = false, ""
		}
	}
	if !p.opened {
		p.opened = true
		m, _ := so.set.Member(pid)
		p.execs = m.Execs
		e.openProc(p)
	}
	return p
}

func (e *bpfEngine) closeProc(p *offProc) {
	if p.py != nil {
		e.set.open--
	}
	if p.addrs {
		_ = e.tr.PyAddrs.Delete(uint32(p.pid))
		p.addrs = false
	}
	p.py, p.sym = nil, nil
}

// openProc opens p's interpreter and checks that the kernel's walk (the
// target's layout and addresses) fits it.
func (e *bpfEngine) openProc(p *offProc) {
	p.retry = time.Time{}
	putAddrs := func(pid int, kl *pyframes.KernelLayout) error { return kwalk.PutAddrs(e.tr.PyAddrs, pid, kl) }
	// Without the kernel walk its waits are not named (user-space looks
	// read the target only): the reader alone.
	walk := e.kp != nil && e.set.layout != nil
	m := kwalk.OpenMember(p.pid, e.s.Py.Version(), e.set.layout, walk, e.set.set.Starting(p.pid), putAddrs, e.gone)
	p.python, p.refused, p.addrs = m.Python, m.Refused, m.Addrs
	if m.Retry {
		p.retry = time.Now().Add(100 * time.Millisecond)
	}
	if m.Py == nil || m.Python != e.s.Py.Version().String() {
		return // not read, or another version: neither walked nor read
	}
	p.py, p.frameIDs, p.sym = m.Py, map[[2]uint64]int{}, m.Sym
	e.set.open++
	if e.set.open > maxOpenProcs {
		e.dropExited()
	}
}

// dropExited forgets the interpreters of exited members.
func (e *bpfEngine) dropExited() {
	for pid, p := range e.set.procs {
		if pid != e.s.Pid && p.py != nil && e.gone(pid) {
			e.closeProc(p)
		}
	}
}

// gone reports whether pid has exited (or is a zombie).
func (e *bpfEngine) gone(pid int) bool { return e.set.set.Gone(pid) }

// rootFrame is the "[pid N] argv" frame of a thread's process (-1: none,
// no set).
func (e *bpfEngine) rootFrame(tid int) int {
	if e.set == nil {
		return -1
	}
	pid := e.pidOfTid(tid)
	if pid == 0 {
		return e.prof.Intern(flame.ProcessFrame("[pid ?]"))
	}
	p := e.set.procs[pid]
	if p == nil {
		p = &offProc{pid: pid, root: -1}
		e.set.procs[pid] = p
	}
	if p.root < 0 {
		m, _ := e.set.set.Member(pid)
		argv := m.Argv
		if len(argv) == 0 {
			argv, _ = procfs.Default().Cmdline(pid)
		}
		p.root = e.prof.Intern(flame.ProcessFrame(procset.Label(pid, argv)))
	}
	return p.root
}

// threadRefs are the thread states of every walked member (for the
// kernel's map: threads its TLS look-up does not find).
func (e *bpfEngine) threadRefs() []pyframes.ThreadRef {
	refs := e.tids.All()
	if e.set == nil {
		return refs
	}
	refs = append([]pyframes.ThreadRef(nil), refs...)
	for _, pid := range e.members() {
		if pid == e.s.Pid {
			continue
		}
		p := e.proc(pid)
		if p.py == nil || p.refused != "" {
			continue
		}
		if more, err := p.py.ThreadRefs(); err == nil {
			refs = append(refs, more...)
		}
	}
	return refs
}

// symbolizer is the code-object reader of the process that sent a stack,
// with its frame cache (nil: its stacks cannot be named, why says why).
func (e *bpfEngine) symbolizer(tgid int) (*kwalk.Symbolizer, map[[2]uint64]int, string) {
	if e.set == nil || tgid == e.s.Pid || tgid == 0 {
		return e.kp.sym, e.frameIDs, ""
	}
	p := e.proc(tgid)
	if p.sym == nil {
		why := p.refused
		if why == "" {
			why = "not read"
		}
		return nil, nil, why
	}
	return p.sym, p.frameIDs, ""
}

// account is the set's account at the end (nil without a set); one
// process seen alone keeps the profile without roots.
func (e *bpfEngine) account() {
	if e.set == nil {
		return
	}
	st := e.set.set.Stats()
	c := new(SetCounts)
	*c = procset.CountsOf(st)
	var procs []ProcessAccount
	for _, m := range e.set.set.Members() {
		pa := ProcessAccount{Account: procset.AccountOf(m)}
		if p := e.set.procs[m.Pid]; p != nil {
			pa.Python, pa.Refused = p.python, p.refused
			if p.refused != "" {
				c.Refused++
			}
		}
		procs = append(procs, pa)
	}
	if st.Seen <= 1 && !e.opt.SetAsked {
		// -- CMD's children, followed by default, and none came: the
		// output one process gives.
		e.prof = flame.WithoutRoots(e.prof)
		return
	}
	for i := range e.res.Threads {
		t := &e.res.Threads[i]
		t.Pid = e.pidOfTid(t.Tid)
	}
	sumProcesses(procs, e.res.Threads)
	e.res.Processes, e.res.ProcessCounts = procs, c
}
