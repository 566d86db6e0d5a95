//go:build amd64

package offcpu

import (
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// offProc is one member process of an observed set: the program its
// frames were interned for (its reader is the set's Members'), its root
// frame.
type offProc struct {
	pid      int
	m        *kwalk.Member     // the program frameIDs are of (nil: not read yet)
	frameIDs map[[2]uint64]int // (code object, line) -> interned frame, per program
	root     int               // its "[pid N] argv" frame, -1 until interned
	began    uint64            // when the program root names began (procset.Member.Began)
}

// offSet is the bpf engine's state for a set of processes.
type offSet struct {
	set   *procset.Set
	ms    *kwalk.Members
	procs map[int]*offProc
	pidOf map[int]int // tid -> its process
	// changed: a member joined or exec'd (the set's OnChange): its
	// interpreter is read while it starts, not at the next scan.
	changed chan struct{}
}

// newSet reads set's members; the kernel walk, if any, is turned on
// after (openKernelWalk: Members.Walk).
func (e *bpfEngine) newSet(set *procset.Set, kl *pyframes.KernelLayout) {
	so := &offSet{set: set, ms: kwalk.NewMembers(set, e.tr.PyAddrs, kl), procs: map[int]*offProc{}, pidOf: map[int]int{}}
	so.ms.Walk, so.ms.Look = false, 100*time.Millisecond
	// The target's stacks are named by the kernel walk's own symbolizer
	// (symbolizer) while it runs the program attached to.
	so.ms.Add(e.s.Pid, e.s.Py, nil)
	so.procs[e.s.Pid] = &offProc{pid: e.s.Pid, frameIDs: e.frameIDs, root: -1}
	so.procs[e.s.Pid].m = so.ms.Get(e.s.Pid)
	so.changed = make(chan struct{}, 1)
	set.OnChange(func() {
		select {
		case so.changed <- struct{}{}:
		default:
		}
	})
	e.set = so
	// --threads and the thread lines: the other members' threads are
	// named through their own interpreters.
	e.memberNames = session.NewMemberNames(e.s.FS)
	e.memberOf = func(tid int) (int, *pyframes.Process) {
		pid := e.pidOfTid(tid)
		if pid == 0 || pid == e.s.Pid {
			return 0, nil
		}
		// Its reader as opened for its stacks: naming a thread opens none.
		if p := e.set.procs[pid]; p != nil && p.m != nil {
			return pid, p.m.Py
		}
		return pid, nil
	}
}

// sleep waits d, or less when a member joins or execs; it reports
// whether the members should be read now (one changed, or one is
// starting and could not be read yet).
func (e *bpfEngine) sleep(d time.Duration) bool {
	if e.set == nil {
		time.Sleep(d)
		return false
	}
	if e.set.ms.Pending {
		d = min(d, kwalk.RetryLook)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return e.set.ms.Pending
	case <-e.set.changed:
		return true
	}
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

// proc is pid's record and its current program's reader (opened or
// refused at the first call); a new program (an exec, a reused pid)
// starts its frames anew.
func (e *bpfEngine) proc(pid int) (*offProc, *kwalk.Member) {
	p := e.set.procs[pid]
	if p == nil {
		p = &offProc{pid: pid, root: -1}
		e.set.procs[pid] = p
	}
	m := e.set.ms.Get(pid)
	if m != p.m {
		p.m, p.frameIDs = m, map[[2]uint64]int{}
	}
	return p, m
}

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
	m, _ := e.set.set.Member(pid)
	if p.root >= 0 && m.Began != p.began {
		p.root = -1 // another program: another argv
	}
	if p.root < 0 {
		p.began = m.Began
		argv := m.Argv
		if len(argv) == 0 {
			argv, _ = procfs.Default().Cmdline(pid)
		}
		p.root = e.prof.Intern(flame.ProcessFrame(procset.Label(pid, argv)))
	}
	return p.root
}

// threadRefs are the thread states of every walked member (for the
// kernel's map: threads its TLS look-up does not find): the target's
// from its session while it runs the program it was attached to.
func (e *bpfEngine) threadRefs() []pyframes.ThreadRef {
	if e.set == nil {
		return e.tids.All()
	}
	var refs []pyframes.ThreadRef
	if e.set.ms.Seed() == e.s.Pid {
		refs = append(refs, e.tids.All()...)
	}
	e.set.ms.Open()
	return append(refs, e.set.ms.ThreadRefs()...)
}

// symbolizer is the code-object reader of the process that sent a stack,
// with its frame cache (nil: its stacks cannot be named, why says why).
func (e *bpfEngine) symbolizer(tgid int) (*kwalk.Symbolizer, map[[2]uint64]int, string) {
	if e.set == nil || tgid == 0 || tgid == e.s.Pid && e.set.ms.Seed() == tgid {
		return e.kp.sym, e.frameIDs, ""
	}
	p, m := e.proc(tgid)
	if m.Sym == nil {
		return nil, nil, m.Why()
	}
	return m.Sym, p.frameIDs, ""
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
		pa.Python, pa.Refused, _ = e.set.ms.Account(m.Pid)
		if pa.Refused != "" {
			c.Refused++
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

// livePids are the processes whose threads were there at the attach: the
// target, and a set's every live member.
func (e *bpfEngine) livePids() []int {
	if e.set == nil {
		return []int{e.s.Pid}
	}
	pids := []int{e.s.Pid}
	for _, pid := range e.set.set.Live() {
		if pid != e.s.Pid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// memberRefs are a member's reader, frame cache and thread states (or why
// its stacks are not read), for readBefore.
type memberRefs struct {
	p    *offProc
	m    *kwalk.Member
	refs []pyframes.ThreadRef
	why  string // "": read
}

// memberThreads reads member pid's thread states once.
func (e *bpfEngine) memberThreads(pid int) *memberRefs {
	p, m := e.proc(pid)
	mr := &memberRefs{p: p, m: m}
	switch {
	case m == nil || m.Py == nil || m.Sym == nil:
		// As its waits walked in the kernel: a member not walked (not
		// Python, another build) is counted, not named.
		mr.why = "[python stack not named: not read]"
		if m != nil {
			mr.why = "[python stack not named: " + m.Why() + "]"
		}
	default:
		var err error
		if mr.refs, err = m.Py.ThreadRefs(); err != nil {
			mr.why = "[unreadable]"
		}
	}
	return mr
}

// memberStack is the root-first Python stack of thread tid of a member
// (not the target), read through the member's own reader, or a marker.
func (e *bpfEngine) memberStack(mr *memberRefs, tid int) []int {
	var ids []int
	if e.opt.Threads {
		ids = append(ids, e.threadFrame(tid))
	}
	marker := func(s string) []int { return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: s})) }
	if mr.why != "" {
		return marker(mr.why)
	}
	for _, r := range mr.refs {
		if r.NativeID == tid {
			return e.readStack(ids, mr.m.Py, r.Addr, mr.p.frameIDs)
		}
	}
	return marker("[no Python thread state]")
}
