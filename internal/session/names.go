package session

import (
	"errors"
	"os"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// ThreadNamer learns the Python names of the target's threads by kernel
// TID while the target lives, for the engines that root samples at their
// thread (--threads). Names are read from each threading.Thread's own
// _native_id and _name (pyframes.ThreadNames), never joined through the
// thread's ident: glibc gives a finished thread's pthread_t to the next
// thread it starts, so an ident cached for one thread names another.
//
// Threads that come and go (a pool that starts one per request) are named
// only if a read falls in their life. With churn (the engines that label
// samples by thread) the task list is read every namesFast, and while it
// changes (and for namesSettle after) the names are read as often; else,
// and without churn, once per namesSlow (a thread renamed later). A TID
// the kernel hands to a new thread of the target (seen gone, then listed
// again) starts a new generation: the old one keeps its name.
type ThreadNamer struct {
	fs      procfs.FS
	pid     int
	py      func() *pyframes.Process // nil until its interpreter is read (a spawned command)
	every   time.Duration            // how often the task list is read
	names   map[ThreadGen]string
	gens    map[int]int  // tid -> its current generation
	live    map[int]bool // the last task list
	ended   map[int]bool // listed once, gone since
	sameNS  bool
	gone    bool // its process exited
	genBase int  // generations start here (a process's namer after its exec: after the last one's)
	listAt  time.Time
	readAt  time.Time
	changed time.Time // the last task list that differed from the one before
}

// ThreadGen is one thread of the target: its TID and the how-manieth
// thread of the target that TID was given to during the observation
// (0: the first).
type ThreadGen struct{ Tid, Gen int }

const (
	// namesMember: another process of a set lists its threads this often
	// (a set may hold many processes: not every namesFast).
	namesMember = 100 * time.Millisecond
	namesFast   = 20 * time.Millisecond
	namesSettle = 250 * time.Millisecond
	namesSlow   = time.Second
)

// NewThreadNamer starts learning the target's thread names (one read now);
// churn: as often as threads come and go (see ThreadNamer).
func (s *Session) NewThreadNamer(churn bool) *ThreadNamer {
	every := namesSlow
	if churn {
		every = namesFast
	}
	return newThreadNamer(s.FS, s.Pid, func() *pyframes.Process { return s.Py }, every, 0)
}

func newThreadNamer(fs procfs.FS, pid int, py func() *pyframes.Process, every time.Duration, genBase int) *ThreadNamer {
	n := &ThreadNamer{fs: fs, pid: pid, py: py, every: every, genBase: genBase,
		names: map[ThreadGen]string{}, gens: map[int]int{}, live: map[int]bool{}, ended: map[int]bool{}}
	same, err := fs.SamePidNamespace(pid)
	n.sameNS = err != nil || same // unreadable links: no mapping, as hostTids

	n.Look(time.Now())
	return n
}

// Next is when Look has something to do next.
func (n *ThreadNamer) Next() time.Time { return n.listAt.Add(n.every) }

// Look lists the target's tasks and reads their names when due; it
// returns the threads whose name was learned or changed (the caller
// relabels them).
func (n *ThreadNamer) Look(now time.Time) []ThreadGen {
	if now.Sub(n.listAt) < n.every {
		return nil
	}
	n.listAt = now
	if n.gone {
		return nil
	}
	tids, err := n.fs.Tasks(n.pid)
	if err != nil {
		// Exited: the names learned stay, and its pid is not listed
		// again (a set's member may be long gone while the run goes on).
		n.gone = errors.Is(err, os.ErrNotExist)
		return nil
	}
	live := make(map[int]bool, len(tids))
	diff := len(tids) != len(n.live)
	for _, tid := range tids {
		live[tid] = true
		if !n.live[tid] {
			diff = true
			if n.ended[tid] {
				// The kernel gave an ended thread's TID to a new one.
				delete(n.ended, tid)
				n.gens[tid]++
			}
		}
	}
	for tid := range n.live {
		if !live[tid] {
			n.ended[tid] = true
		}
	}
	n.live = live
	if diff {
		n.changed = now
	}
	if now.Sub(n.changed) > namesSettle && now.Sub(n.readAt) < namesSlow {
		return nil
	}
	return n.read(now)
}

// read reads every thread's name once.
func (n *ThreadNamer) read(now time.Time) []ThreadGen {
	n.readAt = now
	py := n.py()
	if py == nil {
		return nil
	}
	ths, err := py.ThreadNames()
	if err != nil {
		return nil
	}
	var host map[int]int
	if !n.sameNS {
		if host = n.fs.HostTids(n.pid); host == nil {
			return nil
		}
	}
	var learned []ThreadGen
	for _, t := range ths {
		tid := t.NativeID
		if host != nil {
			tid = host[tid]
		}
		if tid <= 0 || t.Name == "" {
			continue
		}
		if n.ended[tid] && !n.live[tid] {
			// Not in the list a moment ago: a new thread with an ended
			// thread's TID.
			delete(n.ended, tid)
			n.gens[tid]++
			n.live[tid] = true
		}
		k := ThreadGen{tid, n.Gen(tid)}
		if n.names[k] != t.Name {
			n.names[k] = t.Name
			learned = append(learned, k)
		}
	}
	return learned
}

// Gen is tid's current generation.
func (n *ThreadNamer) Gen(tid int) int { return n.genBase + n.gens[tid] }

// lastGen is the highest generation it has given out.
func (n *ThreadNamer) lastGen() int {
	g := n.genBase
	for _, x := range n.gens {
		g = max(g, n.genBase+x)
	}
	return g
}

// Name is the name last read of thread k ("" when none was read while it
// lived).
func (n *ThreadNamer) Name(k ThreadGen) string { return n.names[k] }

// MemberNames are the thread namers of a set's other processes, by pid:
// each reads its threads' names through its own interpreter.
type MemberNames struct {
	fs procfs.FS
	m  map[int]*memberNamer
}

type memberNamer struct {
	py *pyframes.Process
	n  *ThreadNamer
	// fresh: made since the last Look; its first names relabel the roots
	// made before it (while the process's interpreter was not read yet).
	fresh bool
}

// NewMemberNames starts with none.
func NewMemberNames(fs procfs.FS) *MemberNames {
	return &MemberNames{fs: fs, m: map[int]*memberNamer{}}
}

// Of is pid's namer reading through py (nil when py is: its interpreter
// not read yet); a new one when py changed (an exec: another program).
func (ms *MemberNames) Of(pid int, py *pyframes.Process) *ThreadNamer {
	if ms == nil || py == nil {
		return nil
	}
	m, ok := ms.m[pid]
	if ok && m.py == py {
		return m.n
	}
	base := 0
	if ok {
		// Another program (an exec): its threads are new generations, not
		// the old program's threads that had their tids.
		base = m.n.lastGen() + 1
	}
	n := newThreadNamer(ms.fs, pid, func() *pyframes.Process { return py }, namesMember, base)
	ms.m[pid] = &memberNamer{py: py, n: n, fresh: true}
	return n
}

// Thread is thread tid of pid, read through py, as its root is keyed:
// its generation and its name (0 and "" while py is nil: not read yet).
func (ms *MemberNames) Thread(pid, tid int, py *pyframes.Process) (gen int, name string) {
	n := ms.Of(pid, py)
	if n == nil {
		return 0, ""
	}
	gen = n.Gen(tid)
	return gen, n.Name(ThreadGen{Tid: tid, Gen: gen})
}

// Look looks at each member's threads when due, and calls learned for
// each thread named or renamed since.
func (ms *MemberNames) Look(now time.Time, learned func(pid int, k ThreadGen, name string)) {
	if ms == nil {
		return
	}
	for pid, m := range ms.m {
		if m.fresh {
			m.fresh = false
			for k, name := range m.n.names {
				learned(pid, k, name)
			}
		}
		for _, k := range m.n.Look(now) {
			learned(pid, k, m.n.Name(k))
		}
	}
}
