//go:build amd64

package trace

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// walkConfig is the kernel walker's configuration for the session's
// target (pywalk.h's cfg), or why there is none.
func walkConfig(s *session.Session) (any, *pyframes.KernelLayout, string) {
	if s == nil || s.Py == nil {
		return nil, nil, "no Python interpreter open"
	}
	return procWalkConfig(s.Pid, s.Py)
}

// procWalkConfig is walkConfig for process pid's interpreter py.
func procWalkConfig(pid int, py *pyframes.Process) (any, *pyframes.KernelLayout, string) {
	kl, err := py.KernelLayout()
	if err != nil {
		return nil, nil, err.Error()
	}
	tls, err := py.TLSOffsets()
	if err != nil {
		tls = nil // threads are then found through the map user space fills
	}
	c, err := kwalk.ProgramConfig(pid, kl, kwalk.MaxFrames, tls)
	if err != nil {
		return nil, nil, err.Error()
	}
	return c, kl, ""
}

// kstacks names the stacks the kernel walked: each distinct stack comes
// once through the ring, keyed by its hash, and is symbolized at once
// (while its code objects are alive).
type kstacks struct {
	pid  int
	ring *bpfload.Ring
	// symFor is the reader of the process that sent a stack (a set's
	// member; nil: why not).
	symFor func(tgid int) (*kwalk.Symbolizer, string)
	paths  map[uint64]*kpath
	// symErrs: stacks whose code objects could not be read; firstErr: why.
	symErrs  uint64
	firstErr string
}

func newKstacks(s *session.Session, kl *pyframes.KernelLayout, ring *bpfload.Ring) *kstacks {
	sym := kwalk.NewSymbolizer(s.Py, kl)
	sym.P = s.GuardCode(sym.P) // -p PID: no name read from a program it exec'd
	return &kstacks{pid: s.Pid, ring: ring, symFor: func(int) (*kwalk.Symbolizer, string) { return sym, "" }, paths: map[uint64]*kpath{}}
}

// newSetKstacks names the stacks of a set's members (or a held command),
// each through its own process's reader.
func newSetKstacks(pid int, ms *members, ring *bpfload.Ring) *kstacks {
	return &kstacks{pid: pid, ring: ring, symFor: ms.symbolizer, paths: map[uint64]*kpath{}}
}

// drain symbolizes every stack waiting in the ring.
func (k *kstacks) drain() {
	for {
		b, ok, err := k.ring.Next(time.Now())
		if err != nil || !ok {
			return
		}
		smp, err := kwalk.Decode(b)
		if err != nil || smp.ID == 0 {
			continue
		}
		if _, ok := k.paths[smp.ID]; ok {
			continue // sent again after the kernel's LRU forgot it
		}
		p := &kpath{truncated: !smp.Complete()}
		pid := k.pid
		if smp.Tgid != 0 {
			pid = smp.Tgid
		}
		var frames []pyframes.Frame
		sym, why := k.symFor(pid)
		if sym != nil {
			frames, err = sym.Frames(&smp)
		} else {
			err = errors.New(why)
		}
		if err != nil {
			k.symErrs++
			if k.firstErr == "" {
				k.firstErr = fmt.Sprintf("pid %d: %v", pid, err)
			}
			p.err = true
		} else {
			p.frames = make([]Site, len(frames))
			for i, f := range frames {
				p.frames[i] = Site{Function: f.Function, File: f.File, Line: f.Line}
			}
		}
		k.paths[smp.ID] = p
	}
}

// lookup is the stack of hash id, drained from the ring first if new.
func (k *kstacks) lookup(id uint64) (*kpath, bool) {
	if p, ok := k.paths[id]; ok {
		return p, true
	}
	k.drain()
	p, ok := k.paths[id]
	return p, ok
}

// fillThreads makes the walker's thread map exactly refs.
func fillThreads(m *ebpf.Map, pid int, refs []pyframes.ThreadRef) error {
	return kwalk.FillThreads(m, pid, refs)
}
