package red

import (
	"errors"
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
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

// Event is one syscall exit of the target (red.bpf.c struct event).
type Event struct {
	TEnter uint64 // CLOCK_MONOTONIC ns; 0 when the entry was not seen
	TExit  uint64
	Ret    int64
	Tid    uint32
	Fd     int32
	Nr     uint32
	Len    uint16
	Flags  uint16
	Data   [PrefixLen]byte
}

var errDecode = errors.New("red: bad event")

// decodeEvent parses one ring record (bpf2go's struct event); short
// records are an error.
func decodeEvent(b []byte, ev *Event) error {
	r, err := bpfload.Decode[redEvent](b)
	if err != nil {
		return fmt.Errorf("%w: %w", errDecode, err)
	}
	*ev = Event{TEnter: r.T_enter, TExit: r.T_exit, Ret: r.Ret, Tid: r.Tid, Fd: r.Fd, Nr: r.Nr,
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

// objects are the programs and maps; not the variables (target_tgid is
// fixed at load, event_type only carries struct event into the BTF).
type objects struct {
	redPrograms
	redMaps
}

func (o *objects) Close() {
	_ = o.redPrograms.Close()
	_ = o.redMaps.Close()
}

// probe is the loaded, attached program pair.
type probe struct {
	objs   objects
	links  bpfload.Links
	ring   *bpfload.Ring
	closed bool
}

// openProbe loads red.bpf.c's programs for tgid and attaches them to
// raw_syscalls sys_enter/sys_exit (raw_tp: by name, no tracefs).
func openProbe(tgid int) (*probe, error) {
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
	if err := bpfload.SetVars(bpfload.Var{Spec: s.TargetTgid, Value: uint32(tgid)}); err != nil {
		return nil, fmt.Errorf("red: %w", err)
	}
	p := &probe{}
	if err := bpfload.Load("red's BPF programs", spec, &p.objs); err != nil {
		return nil, err
	}
	if p.links, err = bpfload.AttachSyscalls(p.objs.RedEnter, p.objs.RedExit); err != nil {
		p.Close()
		return nil, fmt.Errorf("red: %w", err)
	}
	if p.ring, err = bpfload.NewRing("events", p.objs.Events); err != nil {
		p.Close()
		return nil, fmt.Errorf("red: %w", err)
	}
	return p, nil
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

// detach stops new events (the ring can still be drained).
func (p *probe) detach() { p.links.Close() }

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
