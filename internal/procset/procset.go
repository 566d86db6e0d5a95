package procset

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/procfs"
)

// Options say how the set grows beyond its seeds.
type Options struct {
	Seeds    []int  // processes that are members from the start
	Children bool   // every process a member forks joins (from its first instruction)
	Cgroup   string // a cgroup v2 directory: every process that runs in it joins
}

// How a process joined the set.
type How string

const (
	Seed   How = "seed"
	Fork   How = "fork"
	Cgroup How = "cgroup"
)

// Event kinds, as procset.h sends them.
const (
	evJoin = 1
	evExec = 2
	evExit = 3
)

var hows = map[uint32]How{1: Seed, 2: Fork, 3: Cgroup}

// event mirrors struct procset_event.
type event struct {
	Time   uint64
	Kind   uint32
	Tgid   uint32
	Parent uint32
	How    uint32
	Code   uint32
	Pad    uint32
}

// Member is one process of the set, as the account has it.
type Member struct {
	Pid    int      `json:"pid"`
	Parent int      `json:"parent,omitempty"`
	How    How      `json:"how"`
	Argv   []string `json:"argv,omitempty"`
	Joined uint64   `json:"joined_ns,omitempty"` // CLOCK_MONOTONIC ns; 0 for a seed
	Execs  int      `json:"execs,omitempty"`
	Exited bool     `json:"exited,omitempty"`
	// ExitedAt: when its last thread exited (CLOCK_MONOTONIC ns, the exit
	// event's time); 0 when not known. That thread's own last switch-out
	// comes after the process left the set: engines that end a thread's
	// window there take its exit from here.
	ExitedAt uint64 `json:"-"`
	// Began: when its current program began (CLOCK_MONOTONIC ns: its
	// join, or its last exec); 0 for a seed.
	Began uint64 `json:"-"`
}

// StartGrace is how long a member's new program may take to map its
// interpreter: read right after its exec, a python is not one yet (its
// libpython not loaded), and "not CPython" is final only after this.
const StartGrace = 2 * time.Second

// Stats is the set's account in numbers.
type Stats struct {
	Seen   int    `json:"seen"`             // members ever
	Late   int    `json:"joined_late"`      // joined after the start (fork, cgroup)
	Exited int    `json:"exited"`           // exited while observed
	Lost   uint64 `json:"events_lost"`      // events the ring had no room for
	Full   uint64 `json:"refused_map_full"` // processes that could not join
}

// Handles are the procset.h objects of one loaded BPF collection.
type Handles struct {
	Procs, Events, Counters *ebpf.Map
	Fork, Exec, Exit        *ebpf.Program
}

// Configure sets procset.h's constants in spec before its load.
func Configure(spec *ebpf.CollectionSpec, o Options) error {
	follow := uint32(0)
	if o.Children {
		follow = 1
	}
	var cg uint64
	if o.Cgroup != "" {
		id, err := procfs.CgroupID(o.Cgroup)
		if err != nil {
			return err
		}
		cg = id
	}
	return bpfload.SetVars(
		bpfload.Var{Spec: spec.Variables["procset_follow"], Value: follow},
		bpfload.Var{Spec: spec.Variables["procset_cgroup"], Value: cg},
	)
}

// Set is a running set: its programs attached, its account kept.
type Set struct {
	h     Handles
	links bpfload.Links
	ring  *bpfload.Ring
	fs    procfs.FS
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	members map[int]*Member
	order   []int
	joined  chan int
	stats   Stats
	// onChange: called (from the reader, outside mu) after a join or an
	// exec: an engine that reads members wakes for it (OnChange).
	onChange func()
}

// Start seeds the map with o.Seeds, attaches the fork, exec and exit
// programs, and reads their events until Close. A seed that is gone by
// now is an error naming it.
func Start(h Handles, o Options) (*Set, error) {
	if h.Procs == nil || h.Events == nil || h.Fork == nil || h.Exec == nil || h.Exit == nil {
		return nil, errors.New("can't start the process set: the BPF object has no procset.h")
	}
	s := &Set{h: h, fs: procfs.Default(), done: make(chan struct{}), members: map[int]*Member{}, joined: make(chan int, 1024)}
	// Attach first: a seed that forks between its seeding and the attach
	// would lose that child.
	for _, p := range []struct {
		prog *ebpf.Program
		tp   string
	}{{h.Fork, "sched_process_fork"}, {h.Exec, "sched_process_exec"}, {h.Exit, "sched_process_exit"}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.tp, Program: p.prog})
		if err != nil {
			s.links.Close()
			return nil, bpfload.Explain("attach a BPF program to raw_tp/"+p.tp, err)
		}
		s.links = append(s.links, l)
	}
	for _, pid := range o.Seeds {
		if err := s.Add(pid); err != nil {
			s.links.Close()
			return nil, err
		}
	}
	// Children forked before the attach: found in /proc now (a fork from
	// here on is the kernel's to add).
	if o.Children {
		for _, pid := range o.Seeds {
			kids, _ := s.fs.Descendants(pid)
			for _, k := range kids {
				_ = s.Add(k) // one that exited meanwhile is not a member
			}
		}
	}
	ring, err := bpfload.NewRing("procset_events", h.Events)
	if err != nil {
		s.links.Close()
		return nil, err
	}
	s.ring = ring
	s.wg.Add(1)
	go s.read()
	return s, nil
}

// Add makes pid a member now (a seed: user space found it).
func (s *Set) Add(pid int) error {
	m := struct {
		Joined uint64
		Parent uint32
		How    uint32
		Execs  uint32
		Pad    uint32
	}{How: 1}
	if err := s.h.Procs.Update(uint32(pid), m, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("can't add pid %d to the observed set: %w", pid, err)
	}
	argv, _ := s.fs.Cmdline(pid)
	s.mu.Lock()
	if _, ok := s.members[pid]; !ok {
		s.members[pid] = &Member{Pid: pid, How: Seed, Argv: argv}
		s.order = append(s.order, pid)
		s.stats.Seen++
	}
	s.mu.Unlock()
	return nil
}

// OnChange has fn called after each join or exec the set reads (from its
// reader goroutine: fn must be quick and safe there), for an engine that
// sleeps between looks to read a new program while it starts. Set it once,
// before the members it should see change.
func (s *Set) OnChange(fn func()) {
	s.mu.Lock()
	s.onChange = fn
	s.mu.Unlock()
}

// Starting says whether pid's current program began less than StartGrace
// ago (a seed's never did, for the set).
func (s *Set) Starting(pid int) bool {
	m, ok := s.Member(pid)
	return ok && m.Began != 0 && clock.MonoNow()-int64(m.Began) < int64(StartGrace)
}

// Joined delivers the pid of each process that joined after the start, in
// order, for engines that prepare something per process. Unread joins
// beyond its buffer are not delivered (Members still has them).
func (s *Set) Joined() <-chan int { return s.joined }

func (s *Set) read() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			s.drain()
			return
		default:
		}
		b, ok, err := s.ring.Next(time.Now().Add(50 * time.Millisecond))
		if err != nil {
			return
		}
		if ok {
			s.apply(b)
		}
	}
}

func (s *Set) drain() {
	for {
		b, ok, err := s.ring.Next(time.Now())
		if err != nil || !ok {
			return
		}
		s.apply(b)
	}
}

func (s *Set) apply(b []byte) {
	e, err := bpfload.Decode[event](b)
	if err != nil {
		return
	}
	pid := int(e.Tgid)
	s.mu.Lock()
	changed := s.applyLocked(pid, e)
	fn := s.onChange
	s.mu.Unlock()
	if changed && fn != nil {
		fn()
	}
}

// applyLocked applies one event (s.mu held) and reports whether a member
// joined or exec'd.
func (s *Set) applyLocked(pid int, e event) bool {
	m := s.members[pid]
	switch e.Kind {
	case evJoin:
		if m != nil && !m.Exited {
			return false
		}
		argv, _ := s.fs.Cmdline(pid)
		s.members[pid] = &Member{Pid: pid, Parent: int(e.Parent), How: hows[e.How], Argv: argv, Joined: e.Time, Began: e.Time}
		s.order = append(s.order, pid)
		s.stats.Seen++
		s.stats.Late++
		select {
		case s.joined <- pid:
		default:
		}
		return true
	case evExec:
		if m != nil {
			m.Execs++
			m.Began = e.Time
			if argv, err := s.fs.Cmdline(pid); err == nil {
				m.Argv = argv
			}
			return true
		}
	case evExit:
		if m != nil && !m.Exited {
			m.Exited, m.ExitedAt = true, e.Time
			s.stats.Exited++
		}
	}
	return false
}

// Has says whether pid is or was a member.
func (s *Set) Has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.members[pid]
	return ok
}

// Member is pid's entry (false when it never was one).
func (s *Set) Member(pid int) (Member, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.members[pid]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// Gone reports whether pid has exited: its exit event came, or /proc has
// it gone or a zombie with no live thread (nothing left to read).
func (s *Set) Gone(pid int) bool {
	if m, ok := s.Member(pid); ok && m.Exited {
		return true
	}
	_, alive := s.fs.LiveTask(pid) // a zombie leader with live threads is alive
	return !alive
}

// Members lists every process that was a member, seeds first, then in the
// order they joined.
func (s *Set) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Member, 0, len(s.order))
	for _, p := range s.order {
		out = append(out, *s.members[p])
	}
	return out
}

// Pids lists the members' pids, sorted.
func (s *Set) Pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]int(nil), s.order...)
	sort.Ints(out)
	return out
}

// Live lists the members that have not exited, sorted.
func (s *Set) Live() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.order))
	seen := make(map[int]bool, len(s.order))
	for _, p := range s.order {
		if !seen[p] && !s.members[p].Exited {
			out = append(out, p) // once: a reused pid is in order twice
		}
		seen[p] = true
	}
	sort.Ints(out)
	return out
}

// Stats is the account so far.
func (s *Set) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	if s.h.Counters != nil {
		if c, err := bpfload.Counters(s.h.Counters, 4); err == nil {
			st.Lost, st.Full = c[0], c[1]
		}
	}
	return st
}

// Close detaches the programs and reads what events are left.
func (s *Set) Close() {
	if s.ring == nil {
		return
	}
	s.links.Close()
	close(s.done)
	s.wg.Wait()
	_ = s.ring.Close()
	s.ring = nil
}
