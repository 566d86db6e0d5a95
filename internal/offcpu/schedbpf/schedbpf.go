//go:build 386 || amd64

package schedbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
)

// Flags of a wait (the F_ bits of offcpu.bpf.c).
const (
	FlagRunQueue = 0x1  // preempted: runnable, not blocked
	FlagD        = 0x2  // uninterruptible sleep
	FlagRegs     = 0x4  // Sysnr and FlagGIL are valid
	FlagGIL      = 0x8  // the syscall's first argument lies in the GIL state
	FlagBefore   = 0x10 // off CPU since before the attach (no stacks)
	FlagNew      = 0x20 // a new thread's wait for its first CPU (no stacks)
	FlagFiltered = 0x40 // shorter than Config.MinBlockNS
)

// Counter slots (C_ in offcpu.bpf.c).
const (
	CSwitches = iota
	COut
	CIn
	CDropStart
	CDropWaits
	CDropWaitsNS
	CDropThreads
	CKstackErr
	CKstackReused
	CUnpaired
	CPyidHit
	CWakes
	CDropWakes
	CDropOffwake
	CWakeJoined
	NCounters
)

// Aliases of the generated types, for the engine.
type (
	Start = offcpuStart
	Wkey  = offcpuWkey
	Wval  = offcpuWval
	Thr   = offcpuThr
	Pkey  = offcpuPkey
	Wake  = offcpuWake
	Okey  = offcpuOkey
)

// Config of a load.
type Config struct {
	Tgid         uint32
	GILLo, GILHi uint64
	MinBlockNS   uint64
	// ReuseNS: a thread blocking again in the same syscall on the same
	// first argument within this time reuses its last kernel stack id
	// instead of walking the stack (0: always walk).
	ReuseNS    uint64
	MapEntries uint32 // 0: the object's sizes; else every hash map's size (tests)
	// Waker: also attach to sched_waking and join each wait to its waker
	// (maps Wakes and Offwake).
	Waker bool
}

// Tracer is the loaded and attached program with its maps.
type Tracer struct {
	Attach   string // "tp_btf/sched_switch" or "raw_tp/sched_switch"
	Regs     bool   // syscall hints available
	Starts   *ebpf.Map
	Waits    *ebpf.Map
	Threads  *ebpf.Map
	Pyids    *ebpf.Map
	Kstacks  *ebpf.Map
	Counters *ebpf.Map
	Wakes    *ebpf.Map // --waker only
	Offwake  *ebpf.Map // --waker only
	WakeAt   string    // "tp_btf/sched_waking" or "raw_tp/sched_waking" with --waker
	prog     *ebpf.Program
	lnk      link.Link
	wprog    *ebpf.Program
	wlnk     link.Link
	attachNS *ebpf.Variable
	outSeq   *ebpf.Variable
	stopNS   *ebpf.Variable
}

type loaded struct {
	Starts   *ebpf.Map      `ebpf:"starts"`
	Waits    *ebpf.Map      `ebpf:"waits"`
	Threads  *ebpf.Map      `ebpf:"threads"`
	Pyids    *ebpf.Map      `ebpf:"pyids"`
	Kstacks  *ebpf.Map      `ebpf:"kstacks"`
	Counters *ebpf.Map      `ebpf:"counters"`
	Wakes    *ebpf.Map      `ebpf:"wakes"`
	Offwake  *ebpf.Map      `ebpf:"offwake"`
	AttachNS *ebpf.Variable `ebpf:"attach_ns"`
	OutSeq   *ebpf.Variable `ebpf:"out_seq"`
	StopNS   *ebpf.Variable `ebpf:"stop_ns"`
}

// ErrUnavailable wraps every reason the engine could not start.
var ErrUnavailable = errors.New("eBPF engine unavailable")

// Load loads the program and its maps and attaches it, trying tp_btf with
// syscall hints, then raw_tp with and without them. attachNS is called
// right before the attach: the CLOCK_MONOTONIC time the kernel side counts
// waits that began before it from.
func Load(cfg Config, attachNS func() int64) (*Tracer, error) {
	var errs []error
	for _, v := range []struct {
		prog string
		regs bool
	}{{"offcpu_btf", true}, {"offcpu_raw", true}, {"offcpu_raw", false}} {
		t, err := load(cfg, v.prog, v.regs, attachNS)
		if err == nil {
			return t, nil
		}
		errs = append(errs, err)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			break // the next variant would be refused the same way
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

func load(cfg Config, progName string, regs bool, attachNS func() int64) (*Tracer, error) {
	spec, err := loadOffcpu()
	if err != nil {
		return nil, err
	}
	set := func(name string, v any) error {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("offcpu.bpf.o has no variable %s", name)
		}
		return vs.Set(v)
	}
	var u8, wk uint8
	if regs {
		u8 = 1
	}
	wprogName := ""
	if cfg.Waker {
		wk = 1
		wprogName = "waking_raw"
		if progName == "offcpu_btf" {
			wprogName = "waking_btf"
		}
	}
	for _, e := range []error{set("target_tgid", cfg.Tgid), set("gil_lo", cfg.GILLo), set("gil_hi", cfg.GILHi),
		set("use_regs", u8), set("waker", wk), set("min_block_ns", cfg.MinBlockNS), set("reuse_ns", cfg.ReuseNS)} {
		if e != nil {
			return nil, e
		}
	}
	if cfg.MapEntries > 0 {
		for _, n := range []string{"starts", "waits", "threads", "pyids", "wakes", "offwake"} {
			spec.Maps[n].MaxEntries = cfg.MapEntries
		}
	}
	if !cfg.Waker {
		// Unused: the smallest the kernel takes.
		spec.Maps["wakes"].MaxEntries = 1
		spec.Maps["offwake"].MaxEntries = 1
	}
	for n := range spec.Programs {
		if n != progName && n != wprogName {
			delete(spec.Programs, n)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		attach := "raw_tp"
		if progName == "offcpu_btf" {
			attach = "tp_btf"
		}
		return nil, fmt.Errorf("load %s/sched_switch (syscall hints %v): %w", attach, regs, err)
	}
	var l loaded
	if err := coll.Assign(&l); err != nil {
		coll.Close()
		return nil, fmt.Errorf("offcpu.bpf.o: %w", err)
	}
	prog := coll.DetachProgram(progName)
	var wprog *ebpf.Program
	if wprogName != "" {
		wprog = coll.DetachProgram(wprogName)
	}
	coll.Close() // the maps we assigned stay open: Assign took them
	t := &Tracer{Regs: regs, Starts: l.Starts, Waits: l.Waits, Threads: l.Threads, Pyids: l.Pyids,
		Kstacks: l.Kstacks, Counters: l.Counters, prog: prog, wprog: wprog, attachNS: l.AttachNS, outSeq: l.OutSeq, stopNS: l.StopNS}
	if cfg.Waker {
		t.Wakes, t.Offwake = l.Wakes, l.Offwake
	} else {
		l.Wakes.Close()
		l.Offwake.Close()
	}
	if err := t.attachNS.Set(uint64(attachNS())); err != nil {
		t.Close()
		return nil, fmt.Errorf("set attach_ns: %w", err)
	}
	if progName == "offcpu_btf" {
		t.Attach = "tp_btf/sched_switch"
		t.lnk, err = link.AttachTracing(link.TracingOptions{Program: prog})
	} else {
		t.Attach = "raw_tp/sched_switch"
		t.lnk, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: prog})
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("attach %s: %w", t.Attach, err)
	}
	if wprog == nil {
		return t, nil
	}
	// Attached second: a waking noted before the switch program runs
	// would only be dropped at the next switch-in.
	if progName == "offcpu_btf" {
		t.WakeAt = "tp_btf/sched_waking"
		t.wlnk, err = link.AttachTracing(link.TracingOptions{Program: wprog})
	} else {
		t.WakeAt = "raw_tp/sched_waking"
		t.wlnk, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_waking", Program: wprog})
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("attach %s: %w", t.WakeAt, err)
	}
	return t, nil
}

// OutSeq counts the target switch-outs recorded so far, read from the
// program's memory (no syscall); ok false when it can't be read.
func (t *Tracer) OutSeq() (n uint64, ok bool) {
	return n, t.outSeq.Get(&n) == nil
}

// Stop ends the window at ns (CLOCK_MONOTONIC): the program ignores
// later events, so what the maps hold afterwards is the state at ns.
func (t *Tracer) Stop(ns int64) error {
	if err := t.stopNS.Set(uint64(ns)); err != nil {
		return fmt.Errorf("set stop_ns: %w", err)
	}
	return nil
}

// Detach stops the program; the maps stay readable.
func (t *Tracer) Detach() {
	if t.wlnk != nil {
		t.wlnk.Close()
		t.wlnk = nil
	}
	if t.lnk != nil {
		t.lnk.Close()
		t.lnk = nil
	}
}

// Close detaches and frees everything.
func (t *Tracer) Close() {
	t.Detach()
	for _, c := range []interface{ Close() error }{t.prog, t.wprog, t.Starts, t.Waits, t.Threads, t.Pyids, t.Kstacks, t.Counters, t.Wakes, t.Offwake} {
		if c != nil && !isNil(c) {
			c.Close()
		}
	}
}

func isNil(c any) bool {
	switch v := c.(type) {
	case *ebpf.Map:
		return v == nil
	case *ebpf.Program:
		return v == nil
	}
	return false
}

// Counters sums the per-CPU counters.
func (t *Tracer) ReadCounters() ([NCounters]uint64, error) {
	var out [NCounters]uint64
	for i := range out {
		var per []uint64
		if err := t.Counters.Lookup(uint32(i), &per); err != nil {
			return out, fmt.Errorf("read counter %d of map counters: %w", i, err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

// Stack returns the addresses of a stack id, innermost first.
func Stack(m *ebpf.Map, id int32) ([]uint64, error) {
	b, err := m.LookupBytes(uint32(id))
	if err != nil || b == nil {
		return nil, fmt.Errorf("stack id %d: %w", id, errors.Join(err, ebpf.ErrKeyNotExist))
	}
	var out []uint64
	for i := 0; i+8 <= len(b); i += 8 {
		a := uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
			uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
		if a == 0 {
			break
		}
		out = append(out, a)
	}
	return out, nil
}

// Entries counts a hash map's entries (its keys, walked).
func Entries(m *ebpf.Map) int {
	it := m.Iterate()
	var n int
	var k, v []byte
	for it.Next(&k, &v) {
		n++
	}
	return n
}

// Gate names what decides whether this process may load BPF programs,
// and where it stands.
func Gate() string {
	v := procfs.Default().UnprivilegedBPF("?")
	yes := func(c int) string {
		if capability.Has(c) {
			return "yes"
		}
		return "no"
	}
	return "gate: CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) — held: CAP_BPF " + yes(capability.CapBPF) +
		", CAP_PERFMON " + yes(capability.CapPerfmon) + ", CAP_SYS_ADMIN " + yes(capability.CapSysAdmin) +
		"; kernel.unprivileged_bpf_disabled=" + v
}
