//go:build amd64

package kwalk

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Members reads the processes of a set whose stacks a program walks with
// the target's layout: each member's interpreter is opened (OpenMember)
// as soon as it can be read, again when it runs another program (an exec,
// or its pid reused by a new process), and retried while it starts. One
// of the target's build mapped elsewhere (an exec'd python: ASLR) gets
// its addresses in the program's pyaddrs map, dropped at its exit (its
// number may come back as another process). An exited member's reader
// is kept (its symbolizer's cache still names the stacks that come after
// its exit) until more than MaxOpen are open. The target itself is
// Added with its session's reader, until it execs.
//
// A member's *Member changes when it is reopened: an engine that keeps
// something per program (interned frames, a root frame) compares it.
type Members struct {
	set     *procset.Set
	addrs   *ebpf.Map // the program's pyaddrs
	target  pyframes.Version
	layout  *pyframes.KernelLayout
	seed    int // the target while its session's reader reads it (-1 after its exec)
	procs   map[int]*memberState
	open    int  // readers open
	Pending bool // after Open: a member's interpreter could not be read yet (starting)
	// Walk false: members are read, not walked (no kernel walk to fit,
	// no addresses to put).
	Walk bool
	// Look is how soon a member that could not be read while starting is
	// tried again (RetryLook when 0).
	Look time.Duration
}

type memberState struct {
	Member
	execs int       // its execs when it was opened
	began uint64    // when its program began (procset.Member.Began): another after an exec or a reused pid
	retry time.Time // not readable yet: try again after this
	at    int64     // CLOCK_MONOTONIC ns when it was opened (its addresses, if its own, in the map from then)
}

// RetryLook is how soon a member whose interpreter is starting is tried
// again: its walks fail their checks (another's addresses) until then.
const RetryLook = 5 * time.Millisecond

// MaxOpen bounds the readers kept open; past it, those of exited members
// are dropped (their later stacks: unreadable, process exited).
const MaxOpen = 64

// NewMembers reads set's members for a program whose pyaddrs map is
// addrs, walking with layout (the target's).
func NewMembers(set *procset.Set, addrs *ebpf.Map, layout *pyframes.KernelLayout) *Members {
	return &Members{set: set, addrs: addrs, layout: layout, procs: map[int]*memberState{}, Walk: true}
}

// Add makes pid, read through py and named by sym, the target: the
// version members are checked against.
func (ms *Members) Add(pid int, py *pyframes.Process, sym *Symbolizer) {
	ms.seed, ms.target = pid, py.Version()
	st := &memberState{Member: Member{Py: py, Sym: sym, Python: ms.target.String()}}
	if m, ok := ms.set.Member(pid); ok {
		st.execs, st.began = m.Execs, m.Began
	}
	ms.procs[pid] = st
	ms.open++
}

// Get is pid's member, opened (or refused) now if it was not, if it runs
// another program since, or if its retry is due.
func (ms *Members) Get(pid int) *Member {
	p := ms.procs[pid]
	m, known := ms.set.Member(pid)
	switch {
	case p == nil:
	case known && (m.Execs != p.execs || m.Began != p.began):
		// A new program: its own memory and maybe interpreter. The
		// target's too: its session's reader is of the program before.
		ms.close(pid, p)
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
	p = &memberState{Member: OpenMember(pid, ms.target, ms.layout, ms.Walk && ms.layout != nil, ms.set.Starting(pid), put, ms.set.Gone),
		execs: m.Execs, began: m.Began, at: clock.MonoNow()}
	if p.Retry {
		look := ms.Look
		if look <= 0 {
			look = RetryLook
		}
		p.retry = time.Now().Add(look)
	}
	if p.Py != nil {
		ms.open++
	}
	ms.procs[pid] = p
	if ms.open > MaxOpen {
		ms.dropExited()
	}
	return &p.Member
}

// Unready says whether a walk of pid at mono ns t went with the target's
// addresses before pid's own were in the program's map: pid is a member
// (not the target) not opened by then, or opened with its own addresses
// (an exec'd or unrelated interpreter of the target's build) after t. Its
// walk then fails its checks for that reason, not a torn chain. It opens
// nothing.
func (ms *Members) Unready(pid int, t int64) bool {
	if pid == ms.seed {
		return false
	}
	p := ms.procs[pid]
	switch {
	case p == nil:
		// A fork of the target, still running its program, has its
		// addresses: walked right from its first call.
		m, ok := ms.set.Member(pid)
		return !ok || m.How != procset.Fork || m.Execs > 0
	case p.Retry:
		return true // not readable yet (starting): its own addresses not put
	case p.at > t:
		// Opened after the call: its own addresses (or its refusal) came
		// then; a fork shares the target's and walks from its first call.
		return p.Addrs || p.Sym == nil
	}
	return false
}

// close drops p's addresses and reader.
func (ms *Members) close(pid int, p *memberState) {
	if p.Addrs && ms.addrs != nil {
		_ = ms.addrs.Delete(uint32(pid))
		p.Addrs = false
	}
	if p.Py != nil {
		ms.open--
	}
	p.Py, p.Sym = nil, nil
}

// dropExited closes the readers of exited members but the target's.
func (ms *Members) dropExited() {
	for pid, p := range ms.procs {
		if pid != ms.seed && p.Py != nil && ms.set.Gone(pid) {
			ms.close(pid, p)
			p.Gone = true
		}
	}
}

// Open opens every live member not read yet and drops the addresses of
// the exited ones; Pending says whether one is starting.
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
		case p != nil && p.Addrs && ms.addrs != nil:
			_ = ms.addrs.Delete(uint32(m.Pid))
			p.Addrs = false
		}
	}
}

// Account is what pid's last program read says for a set's account: its
// version, and why it was not walked ("" when it was, or when it exited
// before it could be read); ok false: never read.
func (ms *Members) Account(pid int) (python, refused string, ok bool) {
	p := ms.procs[pid]
	if p == nil {
		return "", "", false
	}
	if !p.Gone {
		refused = p.Refused
	}
	return p.Python, refused, true
}

// Seed is the target's pid while its session's reader reads it: after its
// exec it is a member like the others (-1), read through its own.
func (ms *Members) Seed() int { return ms.seed }

// Symbolizer is the reader of the process that sent a stack (nil: why not).
func (ms *Members) Symbolizer(pid int) (*Symbolizer, string) {
	p := ms.Get(pid)
	if p.Sym == nil {
		return nil, p.Why()
	}
	return p.Sym, ""
}

// Tick hands one clock reading to every open reader's symbolizer.
func (ms *Members) Tick(now time.Time) {
	for _, p := range ms.procs {
		if p.Sym != nil {
			p.Sym.Tick(now)
		}
	}
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
