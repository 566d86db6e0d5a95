//go:build 386 || amd64

package schedbpf

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procset"
)

// Flags of a wait (the F_ bits of offcpu.bpf.c).
const (
	FlagRunQueue = 0x1   // preempted: runnable, not blocked
	FlagD        = 0x2   // uninterruptible sleep
	FlagRegs     = 0x4   // Sysnr and FlagGIL are valid
	FlagGIL      = 0x8   // the syscall's first argument lies in the GIL state
	FlagBefore   = 0x10  // off CPU since before the attach (no stacks)
	FlagNew      = 0x20  // a new thread's wait for its first CPU (no stacks)
	FlagFiltered = 0x40  // shorter than Config.MinBlockNS
	FlagWoken    = 0x80  // with FlagRunQueue: a blocked wait's time after its waking
	FlagPrePy    = 0x100 // began before the walk was configured (Config.Late)
	FlagStopped  = 0x200 // prev_state had __TASK_STOPPED or __TASK_TRACED: a job-control or ptrace stop
	FlagNoFds    = 0x400 // with FlagRegs: a select, pselect6, poll or ppoll given no descriptor and a timeout (a sleep)
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
	CPyWalked
	CPyTrunc
	CPyFault
	CPyInvalid
	CPyNoPy
	CPyEmpty
	CPyNew
	CPyLost
	CWoken
	CWokenNS
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
	// Waker: join each wait to its waker (map Offwake; the program on
	// sched_waking, always attached, then also notes who woke the thread).
	Waker bool
	// Walk, when not nil, is the walker configuration (pywalk.h's struct
	// config, from kwalk.Config): each switch-out then walks the thread's
	// Python stack (maps Tstates, Pystacks).
	Walk any
	// Late: the walk's configuration comes after the load; waits that
	// begin before carry FlagPrePy. With Walk (the layout read from the
	// held command's files: pyframes.CommandLayout) the layout is fixed at
	// load and SetAddrs gives the process's addresses; without, SetWalk
	// gives the whole configuration (the maps are sized for it) to a
	// program the verifier checked for every version: a longer load.
	Late bool
	// HeldPid: a command held before its exec: nothing is recorded until
	// that process execs (its holder's threads and wait are not the
	// target's); Attached then says when.
	HeldPid uint32
	// EndAtExec: Tgid's exec ends the window in the kernel (-p PID: the
	// program it becomes is not the one observed).
	EndAtExec bool
	// Set, when not nil, observes a set of processes (procset.h: seeds,
	// forks of members, a cgroup's) instead of Tgid alone (Tgid must be
	// 0); Tracer.Set keeps its account.
	Set *procset.Options
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
	Wakes    *ebpf.Map    // tid -> its last waking (split of blocked waits; the waker with --waker)
	Offwake  *ebpf.Map    // --waker only
	WakeAt   string       // "tp_btf/sched_waking" or "raw_tp/sched_waking"
	Tstates  *ebpf.Map    // with Config.Walk: tid/fsbase -> thread state (kwalk.FillThreads)
	Pystacks *ebpf.Map    // with Config.Walk: a ring of new Python stacks (kwalk.Decode)
	PyAddrs  *ebpf.Map    // with Config.Walk: a member's own interpreter addresses (pywalk.h pyaddrs)
	Set      *procset.Set // with Config.Set: the observed processes
	prog     *ebpf.Program
	lnk      link.Link
	wprog    *ebpf.Program
	wlnk     link.Link
	eprog    *ebpf.Program // HeldPid: arms the program at the exec
	elnk     link.Link
	attachNS *ebpf.Variable
	outSeq   *ebpf.Variable
	stopNS   *ebpf.Variable
	execNS   *ebpf.Variable // EndAtExec: when the target exec'd (0: not yet)
	cfg      *ebpf.Variable // the walk's configuration (pywalk.h struct config)
	late     *ebpf.Variable // Late with Walk: the process's addresses (pywalk.h struct late_addrs)
	gilLo    *ebpf.Variable
	gilHi    *ebpf.Variable
	armed    *ebpf.Variable
	others   closers         // the walker's maps nobody reads from Go
	progs    []*ebpf.Program // the set's programs
}

type closers []*ebpf.Map

func (c closers) Close() error {
	for _, m := range c {
		m.Close()
	}
	return nil
}

// loaded is what one load assigns: bpf2go's maps and variables, and the
// variant's programs under fixed names (load keeps only those).
type loaded struct {
	offcpuMaps
	offcpuVariables
	Switch *ebpf.Program `ebpf:"switch"`
	Waking *ebpf.Program `ebpf:"waking"`
	Exec   *ebpf.Program `ebpf:"offcpu_exec"`
}

// lateVar is offcpulate's own variable.
type lateVar struct {
	Late *ebpf.Variable `ebpf:"late"`
}

// setProgs are procset.h's programs, loaded with a set only.
type setProgs struct {
	Fork *ebpf.Program `ebpf:"procset_fork"`
	Exec *ebpf.Program `ebpf:"procset_exec"`
	Exit *ebpf.Program `ebpf:"procset_exit"`
}

// ErrUnavailable wraps every reason the engine could not start.
var ErrUnavailable = errors.New("eBPF engine unavailable")

// Load loads the program and its maps and attaches it, trying tp_btf with
// syscall hints, then raw_tp with and without them. attachNS is called
// right before the attach: the CLOCK_MONOTONIC time the kernel side counts
// waits that began before it from.
func Load(cfg Config, attachNS func() int64) (*Tracer, error) {
	if err := bpfload.CheckPidNS(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
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
		if errors.Is(err, capability.ErrPermission) {
			break // the gate: the next variant would be refused the same way
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

func load(cfg Config, progName string, regs bool, attachNS func() int64) (*Tracer, error) {
	var s offcpuSpecs
	load := loadOffcpu
	switch {
	case cfg.Late && cfg.Walk != nil:
		load = loadOffcpulate // the same program, its addresses writable (offcpu.bpf.c)
	case cfg.Late:
		load = loadOffcpuheld // the same program, its cfg writable
	}
	spec, err := bpfload.Spec(load, &s)
	if err != nil {
		return nil, err
	}
	var u8, wk, set uint8
	if cfg.Set != nil {
		if cfg.Tgid != 0 {
			return nil, errors.New("offcpu's program: a set and one tgid both given")
		}
		set = 1
		if err := procset.Configure(spec, *cfg.Set); err != nil {
			return nil, err
		}
	}
	if regs {
		u8 = 1
	}
	if cfg.Waker {
		wk = 1
	}
	var late, armed uint8 = 0, 1
	if cfg.Late {
		late = 1
	}
	if cfg.HeldPid != 0 {
		armed = 0
	}
	if err := bpfload.SetVars(bpfload.Var{Spec: s.TargetTgid, Value: cfg.Tgid}, bpfload.Var{Spec: s.WalkLate, Value: late}, bpfload.Var{Spec: s.HeldPid, Value: cfg.HeldPid},
		bpfload.Var{Spec: s.Armed, Value: armed}, bpfload.Var{Spec: s.UseRegs, Value: u8}, bpfload.Var{Spec: s.Waker, Value: wk}, bpfload.Var{Spec: s.UseSet, Value: set},
		bpfload.Var{Spec: s.MinBlockNs, Value: cfg.MinBlockNS}, bpfload.Var{Spec: s.ReuseNs, Value: cfg.ReuseNS}); err != nil {
		return nil, err
	}
	if cfg.EndAtExec && cfg.Tgid != 0 {
		if err := bpfload.SetVars(bpfload.Var{Spec: s.EndPid, Value: cfg.Tgid}); err != nil {
			return nil, err
		}
	}
	if cfg.MapEntries > 0 {
		for _, m := range []*ebpf.MapSpec{s.Starts, s.Waits, s.Threads, s.Pyids, s.Wakes, s.Offwake} {
			m.MaxEntries = cfg.MapEntries
		}
	}
	if cfg.Walk != nil {
		if err := bpfload.SetVars(bpfload.Var{Spec: s.Cfg, Value: cfg.Walk}); err != nil {
			return nil, err
		}
	}
	if cfg.Walk == nil && !cfg.Late {
		// Unused: the smallest the kernel takes.
		s.Tstates.MaxEntries, s.Pyseen.MaxEntries, s.Pystacks.MaxEntries = 1, 1, uint32(os.Getpagesize())
	}
	if !cfg.Waker {
		// Unused: the smallest the kernel takes.
		s.Offwake.MaxEntries = 1
	}
	btf := progName == "offcpu_btf"
	attach := "raw_tp"
	sw, wake := s.OffcpuRaw, s.WakingRaw
	if btf {
		attach = "tp_btf"
		sw, wake = s.OffcpuBtf, s.WakingBtf
	}
	// Only this variant's programs are loaded.
	// (offcpu_exec, a few instructions, is attached with HeldPid only.)
	spec.Programs = map[string]*ebpf.ProgramSpec{"switch": sw, "waking": wake, "offcpu_exec": s.OffcpuExec}
	if cfg.Set != nil {
		spec.Programs["procset_fork"], spec.Programs["procset_exec"], spec.Programs["procset_exit"] = s.ProcsetFork, s.ProcsetExec, s.ProcsetExit
	} else {
		// Unused: the smallest the kernel takes.
		s.Procs.MaxEntries, s.ProcsetEvents.MaxEntries = 1, uint32(os.Getpagesize())
	}
	var o loaded
	var sp setProgs
	var lv lateVar
	var to any = &o
	switch {
	case cfg.Set != nil && cfg.Late && cfg.Walk != nil:
		to = &struct {
			*loaded
			*setProgs
			*lateVar
		}{&o, &sp, &lv}
	case cfg.Set != nil:
		to = &struct {
			*loaded
			*setProgs
		}{&o, &sp}
	case cfg.Late && cfg.Walk != nil:
		to = &struct {
			*loaded
			*lateVar
		}{&o, &lv}
	}
	if err := bpfload.Load(fmt.Sprintf("offcpu's %s/sched_switch program (syscall hints %v)", attach, regs), spec, to); err != nil {
		return nil, err
	}
	t := &Tracer{Regs: regs, Starts: o.Starts, Waits: o.Waits, Threads: o.Threads, Pyids: o.Pyids,
		Kstacks: o.Kstacks, Counters: o.Counters, Tstates: o.Tstates, Pystacks: o.Pystacks,
		PyAddrs: o.Pyaddrs, others: closers{o.CodesOk, o.Pyseen, o.Scratch, o.Win, o.Procs, o.ProcsetEvents, o.ProcsetCounters}, prog: o.Switch, wprog: o.Waking, attachNS: o.AttachNs, outSeq: o.OutSeq, stopNS: o.StopNs, execNS: o.ExecNs,
		cfg: o.Cfg, late: lv.Late, gilLo: o.GilLo, gilHi: o.GilHi, armed: o.Armed}
	if cfg.HeldPid != 0 || (cfg.EndAtExec && cfg.Tgid != 0) {
		t.eprog = o.Exec
	} else {
		o.Exec.Close()
	}
	t.Wakes = o.Wakes
	if cfg.Waker {
		t.Offwake = o.Offwake
	} else {
		o.Offwake.Close()
	}
	if err := t.SetGIL(cfg.GILLo, cfg.GILHi); err != nil {
		t.Close()
		return nil, err
	}

	if t.eprog != nil {
		// Before the switch program: held, it records nothing until the
		// exec; EndAtExec, nothing after it.
		if t.elnk, _, err = bpfload.Attach(t.eprog, "sched_process_exec"); err != nil {
			t.Close()
			return nil, err
		}
	}
	if cfg.HeldPid == 0 {
		if err := t.attachNS.Set(uint64(attachNS())); err != nil {
			t.Close()
			return nil, fmt.Errorf("set attach_ns: %w", err)
		}
	}
	if cfg.Set != nil {
		t.progs = []*ebpf.Program{sp.Fork, sp.Exec, sp.Exit}
		// Seeded and following forks before the switch program attaches: a
		// member is observed from its first switch on.
		if t.Set, err = procset.Start(procset.Handles{Procs: o.Procs, Events: o.ProcsetEvents, Counters: o.ProcsetCounters,
			Fork: sp.Fork, Exec: sp.Exec, Exit: sp.Exit}, *cfg.Set); err != nil {
			t.Close()
			return nil, err
		}
	}
	if t.lnk, t.Attach, err = bpfload.Attach(t.prog, "sched_switch"); err != nil {
		t.Close()
		return nil, err
	}
	if t.wprog == nil {
		return t, nil
	}
	// Attached second: a waking noted before the switch program runs
	// would only be dropped at the next switch-in.
	if t.wlnk, t.WakeAt, err = bpfload.Attach(t.wprog, "sched_waking"); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// SetGIL gives the program the GIL state's address range (the syscall
// hints' GIL class); at load with Config.GILLo/GILHi, or after it.
func (t *Tracer) SetGIL(lo, hi uint64) error {
	if err := t.gilLo.Set(lo); err != nil {
		return fmt.Errorf("set gil_lo: %w", err)
	}
	if err := t.gilHi.Set(hi); err != nil {
		return fmt.Errorf("set gil_hi: %w", err)
	}
	return nil
}

// Attached says when a HeldPid program was armed (CLOCK_MONOTONIC: the
// held process's exec); ok false while it was not.
func (t *Tracer) Attached() (ns int64, ok bool) {
	var a uint8
	var v uint64
	if t.armed.Get(&a) != nil || a == 0 || t.attachNS.Get(&v) != nil {
		return 0, false
	}
	return int64(v), true
}

// SetWalk configures a Late program's walk (walk: kwalk.ProgramConfig's
// value; dormant: kwalk.Dormant of it, the walk off) while the program
// runs (bpfload.SetLive).
func (t *Tracer) SetWalk(dormant, walk any) error { return bpfload.SetLive(t.cfg, dormant, walk) }

// AddrsLate: the program was loaded with its layout (Config.Late with
// Walk) and waits for SetAddrs.
func (t *Tracer) AddrsLate() bool { return t.late != nil }

// SetAddrs gives an AddrsLate program the process's addresses (addrs:
// kwalk.LateAddrs's value; ready: kwalk.LateReady of it, the walk on)
// while the program runs (bpfload.SetLive).
func (t *Tracer) SetAddrs(addrs, ready any) error { return bpfload.SetLive(t.late, addrs, ready) }

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

// ExecAt is when (CLOCK_MONOTONIC ns) the target exec'd with EndAtExec,
// which ended the window there; 0 while it has not.
func (t *Tracer) ExecAt() int64 {
	var n uint64
	if t.execNS == nil || t.execNS.Get(&n) != nil {
		return 0
	}
	return int64(n)
}

// Detach stops the program; the maps stay readable.
func (t *Tracer) Detach() {
	if t.elnk != nil {
		t.elnk.Close()
		t.elnk = nil
	}
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
	if t.Set != nil {
		t.Set.Close()
		t.Set = nil
	}
	for _, p := range t.progs {
		p.Close()
	}
	t.progs = nil
	for _, c := range []interface{ Close() error }{t.prog, t.wprog, t.eprog, t.Starts, t.Waits, t.Threads, t.Pyids, t.Kstacks, t.Counters, t.Wakes, t.Offwake,
		t.Tstates, t.Pystacks, t.PyAddrs, t.others} {
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

// RunStats is the kernel's account of the switch program's runs (and the
// waking program's, with --waker): total run time and count. Zero unless
// BPF run-time stats are on (bpfload.EnableRunStats).
func (t *Tracer) RunStats() (time.Duration, uint64, error) {
	var rt time.Duration
	var n uint64
	for _, p := range []*ebpf.Program{t.prog, t.wprog} {
		if p == nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("can't read program stats: %w", err)
		}
		rt += st.Runtime
		n += st.RunCount
	}
	return rt, n, nil
}

// ReadCounters sums the per-CPU counters.
func (t *Tracer) ReadCounters() ([NCounters]uint64, error) {
	var out [NCounters]uint64
	n, err := bpfload.Counters(t.Counters, NCounters)
	if err != nil {
		return out, err
	}
	copy(out[:], n)
	return out, nil
}

// maxStack is the depth of a kernel stack in the map (offcpu.bpf.c kstacks).
const maxStack = 64

// Stack returns the addresses of a stack id, innermost first.
func Stack(m *ebpf.Map, id int32) ([]uint64, error) {
	var st [maxStack]uint64 // the kstacks map's value: 64 addresses, 0-padded
	if err := m.Lookup(uint32(id), &st); err != nil {
		return nil, fmt.Errorf("stack id %d: %w", id, err)
	}
	var out []uint64
	for _, a := range st {
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
// and where it stands (capability.BPFGate).
func Gate() string { return capability.BPFGate() }
