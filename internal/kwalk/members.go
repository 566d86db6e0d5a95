//go:build amd64

package kwalk

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Members reads the processes of a set whose stacks a program walks with
// the target's layout: each member's interpreter is opened (OpenMember)
// as soon as it can be read, again after it execs, and its reader dropped
// once it exits; one of the target's build mapped elsewhere (an exec'd
// python: ASLR) gets its addresses in the program's pyaddrs map. The
// target itself is Added with its session's reader.
type Members struct {
	set     *procset.Set
	addrs   *ebpf.Map // the program's pyaddrs
	target  pyframes.Version
	layout  *pyframes.KernelLayout
	seed    int // the target: read through the reader Added, never reopened
	procs   map[int]*memberState
	Pending bool // after Open: a member's interpreter could not be read yet (starting)
}

type memberState struct {
	Member
	execs int       // its execs when it was opened
	began uint64    // when its program began (procset.Member.Began): another after an exec or a reused pid
	retry time.Time // not readable yet: try again after this
}

// RetryLook is how soon a member whose interpreter is starting is tried
// again: its walks fail their checks (another's addresses) until then.
const RetryLook = 5 * time.Millisecond

// NewMembers reads set's members for a program whose pyaddrs map is
// addrs, walking with layout (the target's).
func NewMembers(set *procset.Set, addrs *ebpf.Map, layout *pyframes.KernelLayout) *Members {
	return &Members{set: set, addrs: addrs, layout: layout, procs: map[int]*memberState{}}
}

// Add makes pid, read through py, the target: the version members are
// checked against.
func (ms *Members) Add(pid int, py *pyframes.Process, layout *pyframes.KernelLayout) {
	ms.seed, ms.target = pid, py.Version()
	st := &memberState{Member: Member{Py: py, Sym: NewSymbolizer(py, layout), Python: ms.target.String()}}
	if m, ok := ms.set.Member(pid); ok {
		st.execs, st.began = m.Execs, m.Began
	}
	ms.procs[pid] = st
}

// Get is pid's member, opened (or refused) now if it was not, if it runs
// another program since (an exec, or its pid reused by a new process),
// or if its retry is due.
func (ms *Members) Get(pid int) *Member {
	p := ms.procs[pid]
	m, known := ms.set.Member(pid)
	switch {
	case p == nil:
	case known && (m.Execs != p.execs || m.Began != p.began):
		// A new program: its own memory and maybe interpreter. The
		// target's too: its session's reader is of the program before.
		_ = ms.addrs.Delete(uint32(pid))
		if pid == ms.seed {
			ms.seed = -1
		}
		p = nil
	case pid == ms.seed:
	case !p.retry.IsZero() && time.Now().After(p.retry):
		p = nil
	}
	if p != nil {
		return &p.Member
	}
	if ms.target == (pyframes.Version{}) {
		return &Member{Refused: "the target's interpreter is not read yet"}
	}
	put := func(pid int, l *pyframes.KernelLayout) error { return PutAddrs(ms.addrs, pid, l) }
	p = &memberState{Member: OpenMember(pid, ms.target, ms.layout, true, ms.set.Starting(pid), put, ms.set.Gone), execs: m.Execs, began: m.Began}
	if p.Retry {
		p.retry = time.Now().Add(RetryLook)
	}
	ms.procs[pid] = p
	return &p.Member
}

// Open opens every live member not read yet and drops the readers (and
// addresses) of the exited ones; Pending says whether one is starting.
func (ms *Members) Open() {
	ms.Pending = false
	if ms.target == (pyframes.Version{}) {
		return
	}
	for _, m := range ms.set.Members() {
		p := ms.procs[m.Pid]
		switch {
		case !m.Exited:
			if ms.Get(m.Pid).Retry {
				ms.Pending = true
			}
		case p != nil && p.Py != nil && m.Pid != ms.seed:
			_ = ms.addrs.Delete(uint32(m.Pid))
			p.Py, p.Sym, p.Refused = nil, nil, "exited"
		}
	}
}

// Seed is the target's pid while its session's reader reads it: after its
// exec it is a member like the others (-1), read through its own.
func (ms *Members) Seed() int { return ms.seed }

// Symbolizer is the reader of the process that sent a stack (nil: why not).
func (ms *Members) Symbolizer(pid int) (*Symbolizer, string) {
	p := ms.Get(pid)
	if p.Sym == nil {
		why := p.Refused
		if why == "" {
			why = "not read"
		}
		return nil, why
	}
	return p.Sym, ""
}

// ThreadRefs are the thread states of every live walked member but the
// target (its come from its session's tid map), for the kernel's map:
// threads its TLS look-up does not find.
func (ms *Members) ThreadRefs() []pyframes.ThreadRef {
	var refs []pyframes.ThreadRef
	for pid, p := range ms.procs {
		if pid == ms.seed || p.Sym == nil || ms.set.Gone(pid) {
			continue
		}
		if more, err := p.Py.ThreadRefs(); err == nil {
			refs = append(refs, more...)
		}
	}
	return refs
}
