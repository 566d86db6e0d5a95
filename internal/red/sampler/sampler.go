//go:build amd64

package sampler

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Sampler is the loaded program, its per-CPU events and its rings.
type Sampler struct {
	Pid   int
	Hz    int
	CPUs  int // per-CPU events opened
	objs  redsampleObjects
	fds   []int
	hits  *bpfload.Ring
	stack *bpfload.Ring
	sw    link.Link
}

// Open loads the sampler for pid with walkCfg (kwalk.ProgramConfig's value
// for the target), starts hz samples per second on every CPU, and attaches
// the switch program (waits of half a period or more are sent). The
// programs sample the members of the set whose procset.h maps are set
// (red.bpf.c's "procs", "procset_events", "procset_counters": one set for
// both objects), configured as o.
func Open(pid int, walkCfg any, hz int, set map[string]*ebpf.Map, o procset.Options) (*Sampler, error) {
	if hz <= 0 {
		return nil, fmt.Errorf("pid %d: sample rate %d Hz: must be positive", pid, hz)
	}
	if err := bpfload.CheckPidNS(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var s redsampleVariableSpecs
	spec, err := bpfload.Spec(loadRedsample, &s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	minOff := uint64(time.Second) / uint64(hz) / 2
	if err := bpfload.SetVars(bpfload.Var{Spec: s.Cfg, Value: walkCfg}, bpfload.Var{Spec: s.MinOffNs, Value: minOff}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := procset.Configure(spec, o); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p := &Sampler{Pid: pid, Hz: hz}
	if err := loadShared("red's sampler (perf_event/red_sample)", spec, &p.objs, set); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if p.hits, err = bpfload.NewRing("hits", p.objs.Hits); err != nil {
		p.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if p.stack, err = bpfload.NewRing("pystacks", p.objs.Pystacks); err != nil {
		p.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if p.sw, _, err = bpfload.Attach(p.objs.RedSwitch, "sched_switch"); err != nil {
		p.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err := p.attach(); err != nil {
		p.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return p, nil
}

// PyAddrs is the walk's map of a member's own interpreter addresses
// (pywalk.h pyaddrs: kwalk.Members puts them).
func (p *Sampler) PyAddrs() *ebpf.Map { return p.objs.Pyaddrs }

// loadShared loads spec into obj with the set's maps in place of its own.
func loadShared(what string, spec *ebpf.CollectionSpec, obj any, maps map[string]*ebpf.Map) error {
	bpfload.RemoveMemlock()
	if err := spec.LoadAndAssign(obj, &ebpf.CollectionOptions{MapReplacements: maps}); err != nil {
		return bpfload.Explain("load "+what, err)
	}
	return nil
}

// attach opens one task-clock event per CPU (every task: the program keeps
// the target's) and hands each the program.
func (p *Sampler) attach() error {
	fds, err := bpfload.AttachPerCPU(p.objs.RedSample, unix.PERF_COUNT_SW_TASK_CLOCK, p.Hz, "task-clock")
	p.fds = fds
	p.CPUs = len(fds)
	return err
}

// SetThreads hands the kernel the thread states it can't find through a
// thread's TLS (kwalk.FillThreads).
func (p *Sampler) SetThreads(refs []pyframes.ThreadRef) error {
	return kwalk.FillThreads(p.objs.Tstates, p.Pid, refs)
}

// Drain reads every new stack, then every hit, waiting in the rings: the
// stacks first, so a hit's stack is known when the hit is read.
func (p *Sampler) Drain(stack func(kwalk.Sample), hit func(Hit)) error {
	for {
		b, ok, err := p.stack.Next(time.Now())
		if err != nil {
			return fmt.Errorf("pid %d: %w", p.Pid, err)
		}
		if !ok {
			break
		}
		s, err := kwalk.Decode(b)
		if err != nil {
			return fmt.Errorf("pid %d: %w", p.Pid, err)
		}
		stack(s)
	}
	for {
		b, ok, err := p.hits.Next(time.Now())
		if err != nil {
			return fmt.Errorf("pid %d: %w", p.Pid, err)
		}
		if !ok {
			return nil
		}
		h, err := bpfload.Decode[redsampleHit](b)
		if err != nil {
			return fmt.Errorf("pid %d: %w", p.Pid, err)
		}
		hit(Hit{Time: h.Time, Dur: h.Dur, ID: h.Id, Tid: h.Tid, Flags: h.Flags})
	}
}

// Counters sums the kernel's per-CPU counts.
func (p *Sampler) Counters() (Counters, error) {
	n, err := bpfload.Counters(p.objs.Kcounters, kMax)
	if err != nil {
		return Counters{}, fmt.Errorf("pid %d: %w", p.Pid, err)
	}
	return Counters{Samples: n[kSamples], Walked: n[kWalked], Truncated: n[kTruncated], Faulted: n[kFaulted],
		Invalid: n[kInvalid], NoPython: n[kNoPy], NoFrame: n[kEmpty], Stacks: n[kNew], StackLost: n[kStackLost],
		HitLost: n[kHitLost], SwitchOuts: n[kSwitchOut], Waits: n[kWaits], OutFull: n[kOutFull]}, nil
}

// RunTime is the kernel's account of the programs' runs, ticks and
// switches (zero unless bpf stats are on).
func (p *Sampler) RunTime() (tick time.Duration, ticks uint64, sw time.Duration, switches uint64) {
	if st, err := p.objs.RedSample.Stats(); err == nil {
		tick, ticks = st.Runtime, st.RunCount
	}
	if st, err := p.objs.RedSwitch.Stats(); err == nil {
		sw, switches = st.Runtime, st.RunCount
	}
	return
}

// Stop disables the events and detaches the switch program: nothing new;
// the rings stay readable.
func (p *Sampler) Stop() {
	if p.sw != nil {
		_ = p.sw.Close()
		p.sw = nil
	}
	for _, fd := range p.fds {
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
}

// Close detaches and frees everything.
func (p *Sampler) Close() {
	if p.sw != nil {
		_ = p.sw.Close()
		p.sw = nil
	}
	for _, fd := range p.fds {
		_ = unix.Close(fd)
	}
	p.fds = nil
	if p.hits != nil {
		_ = p.hits.Close()
	}
	if p.stack != nil {
		_ = p.stack.Close()
	}
	_ = p.objs.Close()
}
