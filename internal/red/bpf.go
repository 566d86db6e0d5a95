package red

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/procset"
)

// red_bpfel.{go,o} are generated from red.bpf.c by bpf2go (`make
// generate`, needs clang) and committed so that go build needs no clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type event red red.bpf.c -- -I../bpf/include -O2 -g -Wall -Werror

// x86_64 syscall numbers (the ABI red.bpf.c is written for).
const (
	nrRead     = 0
	nrWrite    = 1
	nrClose    = 3
	nrReadv    = 19
	nrWritev   = 20
	nrSendfile = 40
	nrAccept   = 43
	nrSendto   = 44
	nrRecvfrom = 45
	nrSendmsg  = 46
	nrRecvmsg  = 47
	nrShutdown = 48
	nrAccept4  = 288
)

// PrefixLen is how many bytes of each read/write the kernel copies.
const PrefixLen = 128

// Event is one syscall exit of an observed process (red.bpf.c struct
// event).
type Event struct {
	TEnter uint64 // CLOCK_MONOTONIC ns; 0 when the entry was not seen
	TExit  uint64
	Ret    int64
	Tid    uint32
	Pid    uint32 // the thread's process (tgid)
	Fd     int32
	Nr     uint32
	Len    uint16
	Flags  uint16
	Data   [PrefixLen]byte
}

// evPort (EV_PORT): an accept's event carries the listening socket's
// local port in Data[0:2], read by the kernel at the accept.
const evPort = 2

// evKind, evSock (EV_KIND, EV_SOCK): the kernel read what the fd was at
// the call (a close: at its entry), and whether it was a socket.
const (
	evKind = 4
	evSock = 8
)

// NotSocket reports whether the kernel saw the fd as another file than a
// socket at the call (false when it did not look).
func (e *Event) NotSocket() bool { return e.Flags&(evKind|evSock) == evKind }

// ListenPort is the port the kernel read at an accept (0: none).
func (e *Event) ListenPort() int {
	if e.Flags&evPort == 0 {
		return 0
	}
	return int(e.Data[0]) | int(e.Data[1])<<8
}

var errDecode = errors.New("red: bad event")

// decodeEvent parses one ring record (bpf2go's struct event); short
// records are an error.
func decodeEvent(b []byte, ev *Event) error {
	r, err := bpfload.Decode[redEvent](b)
	if err != nil {
		return fmt.Errorf("%w: %w", errDecode, err)
	}
	*ev = Event{TEnter: r.T_enter, TExit: r.T_exit, Ret: r.Ret, Tid: r.Tid, Pid: r.Tgid, Fd: r.Fd, Nr: r.Nr,
		Len: min(r.Len, PrefixLen), Flags: r.Flags, Data: r.Data}
	return nil
}

// Kernel counter slots (red.bpf.c enum).
const (
	cEvents     = 0
	cRingFull   = 1
	cEnterFull  = 2
	cNoEnter    = 3
	cCopyFailed = 4
	cMax        = 8
)

// Counters are the kernel side's own counts.
type Counters struct {
	Events     uint64 `json:"events"`
	RingFull   uint64 `json:"ring_full"`   // events lost: the ring buffer was full
	EnterFull  uint64 `json:"enter_full"`  // entries not kept: the per-thread map was full
	NoEnter    uint64 `json:"no_enter"`    // exits whose entry was not seen (attached mid-call)
	CopyFailed uint64 `json:"copy_failed"` // data prefixes that could not be read
}

// objects are the programs and maps; not the variables (procset.h's are
// fixed at load, event_type only carries struct event into the BTF).
type objects struct {
	redPrograms
	redMaps
}

func (o *objects) Close() {
	_ = o.redPrograms.Close()
	_ = o.redMaps.Close()
}

// probe is the loaded, attached program pair and, for a set of processes,
// the set's programs and account.
type probe struct {
	objs   objects
	links  bpfload.Links
	ring   *bpfload.Ring
	set    *procset.Set // nil: one process, seeded into procs by hand
	closed bool
}

// openProbe loads and starts red.bpf.c's programs for one process.
func openProbe(tgid int) (*probe, error) {
	o := procset.Options{Seeds: []int{tgid}}
	p, err := loadProbe(o)
	if err != nil {
		return nil, err
	}
	if err := p.start(o, false); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// loadProbe loads red.bpf.c's programs with the set's constants (follow
// forks, a cgroup); nothing is attached yet.
func loadProbe(o procset.Options) (*probe, error) {
	if err := bpfload.RequireX86("red's eBPF program"); err != nil {
		return nil, fmt.Errorf("red: %w", err)
	}
	if err := bpfload.CheckPidNS(); err != nil {
		return nil, fmt.Errorf("red: %w", err)
	}
	var s redVariableSpecs
	spec, err := bpfload.Spec(loadRed, &s)
	if err != nil {
		return nil, fmt.Errorf("red: %w", err)
	}
	if err := procset.Configure(spec, o); err != nil {
		return nil, fmt.Errorf("red: %w", err)
	}
	p := &probe{}
	if err := bpfload.Load("red's BPF programs", spec, &p.objs); err != nil {
		return nil, err
	}
	return p, nil
}

// sharedMaps are the set's maps, for another object that includes
// procset.h (the sampler) to filter by the same members.
func (p *probe) sharedMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"procs": p.objs.Procs, "procset_events": p.objs.ProcsetEvents,
		"procset_counters": p.objs.ProcsetCounters}
}

// start puts the seeds in the set and attaches the programs to raw_syscalls
// sys_enter/sys_exit (raw_tp: by name, no tracefs). many: the set grows
// and is accounted (procset.Start: fork, exec and exit programs); else
// the one seed is put in the map and nothing else is attached.
func (p *probe) start(o procset.Options, many bool) error {
	if err := p.seed(o, many); err != nil {
		return err
	}
	return p.attach()
}

// seed is start's first half: the set's members, no syscall seen yet.
func (p *probe) seed(o procset.Options, many bool) error {
	if many {
		set, err := procset.Start(procset.Handles{Procs: p.objs.Procs, Events: p.objs.ProcsetEvents,
			Counters: p.objs.ProcsetCounters, Fork: p.objs.ProcsetFork, Exec: p.objs.ProcsetExec,
			Exit: p.objs.ProcsetExit}, o)
		if err != nil {
			return fmt.Errorf("red: %w", err)
		}
		p.set = set
	} else {
		for _, pid := range o.Seeds {
			if err := p.objs.Procs.Update(uint32(pid), redProcsetMember{How: 1}, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("red: can't add pid %d to the observed set: %w", pid, err)
			}
		}
	}
	return nil
}

// attach is start's second half: the syscall programs and their ring.
func (p *probe) attach() error {
	var err error
	if p.links, err = bpfload.AttachSyscalls(p.objs.RedEnter, p.objs.RedExit); err != nil {
		return fmt.Errorf("red: %w", err)
	}
	if p.ring, err = bpfload.NewRing("events", p.objs.Events); err != nil {
		return fmt.Errorf("red: %w", err)
	}
	return nil
}

// read waits until deadline for one event; ok is false on timeout.
func (p *probe) read(deadline time.Time, ev *Event) (ok bool, err error) {
	b, ok, err := p.ring.Next(deadline)
	if err != nil || !ok {
		return false, err
	}
	if err := decodeEvent(b, ev); err != nil {
		return false, err
	}
	return true, nil
}

// pending reports bytes waiting in the ring.
func (p *probe) pending() int { return p.ring.Pending() }

// counters sums the per-CPU counters.
func (p *probe) counters() (Counters, error) {
	n, err := bpfload.Counters(p.objs.Counters, cMax)
	if err != nil {
		return Counters{}, err
	}
	return Counters{Events: n[cEvents], RingFull: n[cRingFull], EnterFull: n[cEnterFull],
		NoEnter: n[cNoEnter], CopyFailed: n[cCopyFailed]}, nil
}

// detach stops new events (the ring can still be drained) and the set's
// growth (its account is kept).
func (p *probe) detach() {
	p.links.Close()
	if p.set != nil {
		p.set.Close()
	}
}

// Close detaches and frees everything.
func (p *probe) Close() {
	if p.closed {
		return
	}
	p.closed = true
	p.detach()
	if p.ring != nil {
		_ = p.ring.Close()
	}
	p.objs.Close()
}
