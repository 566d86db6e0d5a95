//go:build amd64

package record

import (
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// procRec is one member process of a recorded set: the program its
// frames were interned for (its reader is sr.ms's), its numbers.
type procRec struct {
	pid     int
	m       *kwalk.Member     // the program ids and root are of (nil: not read yet)
	ids     map[[2]uint64]int // (code object as read, lasti) -> interned frame
	root    int               // its "[pid N] argv" frame, -1 until interned
	samples uint64
	cpu0    float64 // CPU seconds at its first reading (0 for a fork: it starts at 0)
	cpu     float64 // the last reading
	readCPU bool
	rateN   uint64 // samples folded at the last reading (the achieved rate's window)
}

// pendingLook is the look period while a member's interpreter is still
// starting: its samples are invalid until its addresses are in the
// kernel's map.
const pendingLook = 20 * time.Millisecond

// setRec is the bpf engine's state for a set.
type setRec struct {
	s      *session.Session // the target's
	set    *procset.Set
	ms     *kwalk.Members
	procs  map[int]*procRec
	unread uint64 // samples of members that exited before their code objects were read
}

func newSetRec(k *kernelRec, r *Recorder, kl *pyframes.KernelLayout) *setRec {
	sr := &setRec{set: k.w.Set, ms: kwalk.NewMembers(k.w.Set, k.w.PyAddrs(), kl), procs: map[int]*procRec{}, s: r.s}
	sr.ms.Look = pendingLook
	// The target is read through the session's own reader.
	sr.ms.Add(r.s.Pid, r.s.Py, k.sym)
	cpu0 := targetCPU(r.s.Pid)
	if h := r.held; h != nil && h.taken {
		cpu0 = h.tcpu0 // sampled from its exec
	}
	sr.procs[r.s.Pid] = &procRec{pid: r.s.Pid, m: sr.ms.Get(r.s.Pid), ids: k.ids, root: -1, cpu0: cpu0}
	// A fork or an exec wakes the look at once: an exec'd interpreter's
	// samples are invalid until its addresses are in the kernel's map.
	sr.set.OnChange(k.w.Wake)
	// --threads: the other members' threads are named through their own
	// interpreters (a refused one's too: its names need no kernel walk).
	r.members = session.NewMemberNames(r.s.FS)
	r.memberPy = func(pid int) *pyframes.Process {
		if m := sr.ms.Get(pid); m != nil {
			return m.Py
		}
		return nil
	}
	return sr
}

// proc is pid's record, its reader opened (or refused) at the first call;
// a new program (an exec, a reused pid) starts its frames and root anew.
func (sr *setRec) proc(pid int) (*procRec, *kwalk.Member) {
	p := sr.procs[pid]
	if p == nil {
		p = &procRec{pid: pid, root: -1}
		if m, ok := sr.set.Member(pid); !ok || m.How != procset.Fork {
			p.cpu0 = targetCPU(pid)
		}
		sr.procs[pid] = p
	}
	m := sr.ms.Get(pid)
	if m != p.m {
		if p.m != nil {
			p.root = -1 // another argv
		}
		p.m, p.ids = m, map[[2]uint64]int{}
	}
	return p, m
}

// openPending opens the members not read yet (a spawned worker's
// exec'd interpreter, a cgroup's process), so that the kernel walks each
// with its own addresses as soon as it can be read, not only once a drain
// brings its first (until then invalid) samples; it reports whether one
// could not be read yet (its interpreter still starting).
func (sr *setRec) openPending() bool {
	sr.ms.Open()
	return sr.ms.Pending
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
// kernel's map: threads its TLS look-up does not find): the target's
// from its session while it runs the program it was attached to.
func (sr *setRec) threadRefs(target []pyframes.ThreadRef, targetPid int) []pyframes.ThreadRef {
	var refs []pyframes.ThreadRef
	if sr.ms.Seed() == targetPid {
		refs = append(refs, target...)
	}
	return append(refs, sr.ms.ThreadRefs()...)
}

// rateWindow reads each member's CPU seconds (an exited one's last reading
// stays; the spawned target's from its exit) and returns the samples and
// the CPU seconds over each member's window: from its first reading to its
// last, the samples folded by then. A member whose CPU was never read
// counts neither.
func (sr *setRec) rateWindow() (uint64, float64) {
	for _, m := range sr.set.Members() {
		p := sr.procs[m.Pid]
		if p == nil {
			p = &procRec{pid: m.Pid, root: -1}
			if m.How != procset.Fork {
				p.cpu0 = targetCPU(m.Pid)
			}
			sr.procs[m.Pid] = p
		}
		if m.Pid == sr.s.Pid {
			if c, ok := sr.s.ExitOwnCPU(); ok {
				p.cpu, p.readCPU, p.rateN = c, true, p.samples
				continue
			}
		}
		// A member that exited reads while it is a zombie (its account
		// complete); after, its last reading stands.
		if st, err := procfs.Default().Stat(m.Pid); err == nil && (!m.Exited || st.State == "Z") && st.CPUSeconds() >= p.cpu {
			p.cpu, p.readCPU, p.rateN = st.CPUSeconds(), true, p.samples
		}
	}
	var n uint64
	sum := 0.0
	for _, p := range sr.procs {
		if p.readCPU && p.cpu > p.cpu0 {
			n += p.rateN
			sum += p.cpu - p.cpu0
		}
	}
	return n, sum
}

// account is the set's account at the end.
func (sr *setRec) account() *SetAccount {
	st := sr.set.Stats()
	a := &SetAccount{Counts: SetCounts{Counts: procset.CountsOf(st), Unreadable: sr.unread}}
	for _, m := range sr.set.Members() {
		pa := ProcessAccount{Account: procset.AccountOf(m)}
		if p := sr.procs[m.Pid]; p != nil {
			pa.Samples = p.samples
			if p.readCPU && p.cpu > p.cpu0 {
				pa.CPUS = p.cpu - p.cpu0
			}
		}
		pa.Python, pa.Refused, _ = sr.ms.Account(m.Pid)
		if pa.Refused != "" {
			a.Counts.Refused++
		}
		a.Processes = append(a.Processes, pa)
	}
	return a
}

// tick hands one clock reading to every open member's symbolizer.
func (sr *setRec) tick(now time.Time) { sr.ms.Tick(now) }

// live lists a recorded set's members now (nil: one process).
func (k *kernelRec) live() func() []int {
	if k == nil || k.set == nil {
		return nil
	}
	return k.set.set.Live
}
