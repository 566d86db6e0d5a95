package session

import (
	"time"
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
	s       *Session
	every   time.Duration // how often the task list is read
	names   map[ThreadGen]string
	gens    map[int]int  // tid -> its current generation
	live    map[int]bool // the last task list
	ended   map[int]bool // listed once, gone since
	sameNS  bool
	listAt  time.Time
	readAt  time.Time
	changed time.Time // the last task list that differed from the one before
}

// ThreadGen is one thread of the target: its TID and the how-manieth
// thread of the target that TID was given to during the observation
// (0: the first).
type ThreadGen struct{ Tid, Gen int }

const (
	namesFast   = 20 * time.Millisecond
	namesSettle = 250 * time.Millisecond
	namesSlow   = time.Second
)

// NewThreadNamer starts learning the target's thread names (one read now);
// churn: as often as threads come and go (see ThreadNamer).
func (s *Session) NewThreadNamer(churn bool) *ThreadNamer {
	n := &ThreadNamer{s: s, every: namesSlow, names: map[ThreadGen]string{}, gens: map[int]int{}, live: map[int]bool{}, ended: map[int]bool{}}
	if churn {
		n.every = namesFast
	}
	same, err := s.FS.SamePidNamespace(s.Pid)
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
	tids, err := n.s.FS.Tasks(n.s.Pid)
	if err != nil {
		return nil // exited: the names learned stay
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
	if n.s.Py == nil {
		return nil
	}
	ths, err := n.s.Py.ThreadNames()
	if err != nil {
		return nil
	}
	var host map[int]int
	if !n.sameNS {
		if host = n.s.hostTids(); host == nil {
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
		k := ThreadGen{tid, n.gens[tid]}
		if n.names[k] != t.Name {
			n.names[k] = t.Name
			learned = append(learned, k)
		}
	}
	return learned
}

// Gen is tid's current generation.
func (n *ThreadNamer) Gen(tid int) int { return n.gens[tid] }

// Name is the name last read of thread k ("" when none was read while it
// lived).
func (n *ThreadNamer) Name(k ThreadGen) string { return n.names[k] }
