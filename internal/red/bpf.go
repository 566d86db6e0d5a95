package red

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
)

// red_bpfel.o is built from red.bpf.c by `make bpf-red` and committed so
// that go build needs no clang.
//
//go:embed red_bpfel.o
var bpfObject []byte

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

const eventSize = 8 + 8 + 8 + 4 + 4 + 4 + 2 + 2 + PrefixLen

var errDecode = errors.New("red: bad event")

// decodeEvent parses one ring record; short records are an error.
func decodeEvent(b []byte, ev *Event) error {
	if len(b) < eventSize {
		return fmt.Errorf("%w: ring record of %d bytes, want %d", errDecode, len(b), eventSize)
	}
	le := binary.LittleEndian
	ev.TEnter = le.Uint64(b[0:])
	ev.TExit = le.Uint64(b[8:])
	ev.Ret = int64(le.Uint64(b[16:]))
	ev.Tid = le.Uint32(b[24:])
	ev.Fd = int32(le.Uint32(b[28:]))
	ev.Nr = le.Uint32(b[32:])
	ev.Len = min(le.Uint16(b[36:]), PrefixLen)
	ev.Flags = le.Uint16(b[38:])
	copy(ev.Data[:], b[40:40+PrefixLen])
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

// probe is the loaded, attached program pair.
type probe struct {
	coll   *ebpf.Collection
	links  []link.Link
	ring   *ringbuf.Reader
	rec    ringbuf.Record
	tgid   uint32
	closed bool
}

// openProbe loads red.bpf.c's programs for tgid and attaches them to
// raw_syscalls sys_enter/sys_exit (raw_tp: by name, no tracefs).
func openProbe(tgid int) (*probe, error) {
	_ = rlimit.RemoveMemlock() // kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(bpfObject))
	if err != nil {
		return nil, fmt.Errorf("red: parse embedded BPF object: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("red: the kernel's verifier refused the program: %w", err)
		}
		if errors.Is(err, unix.EPERM) {
			return nil, &capability.GateError{Op: "load the BPF programs of red", Gate: "missing CAP_BPF and CAP_PERFMON (or root)",
				Fix: "run pyobs as root, or grant it: setcap cap_bpf,cap_perfmon+ep " + os.Args[0], Err: errors.Join(capability.ErrPermission, err)}
		}
		return nil, fmt.Errorf("red: load BPF programs: %w", err)
	}
	p := &probe{coll: coll, tgid: uint32(tgid)}
	cfg := make([]byte, 8)
	binary.LittleEndian.PutUint32(cfg, uint32(tgid))
	if err := coll.Maps["config"].Update(uint32(0), cfg, ebpf.UpdateAny); err != nil {
		p.Close()
		return nil, fmt.Errorf("red: set target tgid %d in map config: %w", tgid, err)
	}
	for _, a := range []struct{ prog, tp string }{{"red_enter", "sys_enter"}, {"red_exit", "sys_exit"}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.tp, Program: coll.Programs[a.prog]})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("red: attach %s to raw tracepoint %s: %w", a.prog, a.tp, err)
		}
		p.links = append(p.links, l)
	}
	r, err := ringbuf.NewReader(coll.Maps["events"])
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("red: open ring buffer map events: %w", err)
	}
	p.ring = r
	return p, nil
}

// read waits until deadline for one event; ok is false on timeout.
func (p *probe) read(deadline time.Time, ev *Event) (ok bool, err error) {
	p.ring.SetDeadline(deadline)
	if err := p.ring.ReadInto(&p.rec); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}
		return false, fmt.Errorf("red: read ring buffer events: %w", err)
	}
	if err := decodeEvent(p.rec.RawSample, ev); err != nil {
		return false, err
	}
	return true, nil
}

// pending reports bytes waiting in the ring.
func (p *probe) pending() int { return p.ring.AvailableBytes() }

// counters sums the per-CPU counters.
func (p *probe) counters() (Counters, error) {
	var c Counters
	m := p.coll.Maps["counters"]
	get := func(i uint32) uint64 {
		var per []uint64
		if err := m.Lookup(i, &per); err != nil {
			return 0
		}
		var s uint64
		for _, v := range per {
			s += v
		}
		return s
	}
	c.Events = get(cEvents)
	c.RingFull = get(cRingFull)
	c.EnterFull = get(cEnterFull)
	c.NoEnter = get(cNoEnter)
	c.CopyFailed = get(cCopyFailed)
	return c, nil
}

// detach stops new events (the ring can still be drained).
func (p *probe) detach() {
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
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
	p.coll.Close()
}
