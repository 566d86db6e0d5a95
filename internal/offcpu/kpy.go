//go:build amd64

package offcpu

import (
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// kpy turns the kernel's Python stacks (by hash) into profile frames.
type kpy struct {
	ring  *bpfload.Ring
	sym   *kwalk.Symbolizer
	stack map[uint64][]int // hash -> frame ids, root first (no thread frame)
	acct  KernelWalk
	last  time.Time // threads map refreshed
}

// walkConfig is the walker's configuration for the target, or why there
// is none.
func (e *bpfEngine) walkConfig() (any, *pyframes.KernelLayout, string) {
	if e.opt.NoKernelWalk {
		return nil, nil, "--kernel-walk=false"
	}
	kl, err := e.s.Py.KernelLayout()
	if err != nil {
		return nil, nil, err.Error()
	}
	tls, err := e.s.Py.TLSOffsets()
	if err != nil {
		tls = nil // threads are then found through the map user space fills
	}
	c, err := kwalk.ProgramConfig(e.s.Pid, kl, kwalk.MaxFrames, tls)
	if err != nil {
		return nil, nil, err.Error()
	}
	return c, kl, ""
}

// openKernelWalk starts reading what the loaded program walks.
func (e *bpfEngine) openKernelWalk(kl *pyframes.KernelLayout) error {
	r, err := bpfload.NewRing("pystacks", e.tr.Pystacks)
	if err != nil {
		return fmt.Errorf("pid %d: %w", e.s.Pid, err)
	}
	e.kp = &kpy{ring: r, sym: guarded(e.s, kwalk.NewSymbolizer(e.s.Py, kl)), stack: map[uint64][]int{}, acct: KernelWalk{On: true}}
	if e.set != nil {
		e.set.ms.Walk = kl != nil // members of the target's build are walked with their own addresses
	}
	e.refreshWalkThreads(true)
	return nil
}

// refreshWalkThreads hands the kernel the thread states it can't find
// through a thread's TLS (every 200 ms at most, unless now).
func (e *bpfEngine) refreshWalkThreads(now bool) {
	if e.kp == nil || (!now && time.Since(e.kp.last) < 200*time.Millisecond) {
		return
	}
	e.kp.last = time.Now()
	e.tids.Refresh()
	_ = kwalk.FillThreads(e.tr.Tstates, e.s.Pid, e.threadRefs())
}

// drainPy symbolizes the new stacks waiting in the ring: at once, while
// their code objects are alive.
func (e *bpfEngine) drainPy() {
	if e.kp == nil {
		return
	}
	for {
		b, ok, err := e.kp.ring.Next(time.Now())
		if err != nil || !ok {
			return
		}
		smp, err := kwalk.Decode(b)
		if err != nil || smp.ID == 0 {
			continue
		}
		if _, ok := e.kp.stack[smp.ID]; ok {
			continue // sent again after pyseen forgot it
		}
		if e.set != nil && smp.Tgid > 0 {
			e.set.pidOf[smp.Tid] = smp.Tgid
		}
		sym, cache, why := e.symbolizer(smp.Tgid)
		ids := []int{}
		if !smp.Complete() {
			ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: smp.Marker()}))
		}
		if sym == nil {
			// A member the walk does not fit (another build), or whose
			// interpreter could not be read.
			e.kp.acct.SymErrors++
			ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[python stack not named: " + why + "]"}))
			e.kp.stack[smp.ID] = ids
			continue
		}
		frames, err := sym.Frames(&smp)
		if err != nil {
			e.kp.acct.SymErrors++
			ids = append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[code object unreadable]"}))
		} else {
			ids = e.pythonIDsIn(ids, frames, cache)
		}
		e.kp.stack[smp.ID] = ids
	}
}

// kernelStackIDs are the frames of a wait's kernel-walked Python stack,
// root first, after the thread frame (--threads).
func (e *bpfEngine) kernelStackIDs(dst []int, th *bthr, pyk, count uint64) []int {
	if e.opt.Threads {
		dst = append(dst, e.threadFrame(th.tid))
	}
	if ids, ok := e.kp.stack[pyk]; ok {
		return append(dst, ids...)
	}
	e.kp.acct.Unnamed += count
	return append(dst, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[python stack lost]"}))
}

func (e *bpfEngine) closeKernelWalk(c [schedbpf.NCounters]uint64) {
	if e.kp == nil {
		return
	}
	a := &e.kp.acct
	a.Walked, a.Truncated, a.Faulted, a.Invalid = c[schedbpf.CPyWalked], c[schedbpf.CPyTrunc], c[schedbpf.CPyFault], c[schedbpf.CPyInvalid]
	a.NoThread, a.NoFrame, a.Distinct, a.RingLost = c[schedbpf.CPyNoPy], c[schedbpf.CPyEmpty], c[schedbpf.CPyNew], c[schedbpf.CPyLost]
	e.kp.ring.Close()
}

// guarded: no name read from a program -p PID exec'd (session.GuardCode).
func guarded(s *session.Session, sym *kwalk.Symbolizer) *kwalk.Symbolizer {
	sym.P = s.GuardCode(sym.P)
	return sym
}
