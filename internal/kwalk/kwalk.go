//go:build amd64

package kwalk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Clock is the software event that drives sampling.
type Clock int

const (
	TaskClock Clock = iota // PERF_COUNT_SW_TASK_CLOCK, one event per CPU
	CPUClock               // PERF_COUNT_SW_CPU_CLOCK, one event per CPU
)

func (c Clock) String() string {
	if c == CPUClock {
		return "cpu-clock"
	}
	return "task-clock"
}

// MaxFrames is the deepest stack a sample records; deeper ones are
// flagged truncated.
const MaxFrames = 128

// Options of a walker.
type Options struct {
	Freq      int   // samples per second per CPU event (default 99)
	Clock     Clock // default TaskClock
	MaxFrames int   // default and limit MaxFrames
	RingBytes int   // ring buffer size, a power of two ≥ one page (default 4 MiB)
	// Latency: the kernel wakes the reader only when a sixteenth of the
	// ring is waiting (a wake-up is an interrupt: a VM exit on a guest);
	// Read also looks at the ring this often (default 50 ms). Negative:
	// wake the reader at every sample.
	Latency time.Duration
	// TLS: offsets from a thread's fsbase where the runtime keeps the
	// thread's own tstate pointer (pyframes.Process.TLSOffsets), tried when
	// the tid is not in the map; up to 2. Each candidate is checked
	// (thread_id == fsbase, native_thread_id == tid).
	TLS []int64
	// Set: sample every member of this process set (procset.h: seeds,
	// their children as they fork, a cgroup's processes) instead of pid
	// alone; Walker.Set keeps its account. The layout is pid's: a member
	// whose interpreter has other addresses is walked to no stack (its
	// code objects fail the type check).
	Set *procset.Options
	// Aggregate: the kernel counts samples by (stack, thread, verdict)
	// and sends each distinct stack once; Read returns those stacks (each
	// once, as it is first seen) and DrainCounts the counts. User space
	// then pays per distinct stack, not per sample.
	Aggregate bool
	// KernelStacks (with Aggregate): each sample's kernel call chain, by
	// id (Count.KStack, Walker.KernelStack).
	KernelStacks bool
	// NativeBytes (with Aggregate): each sample instead sends its count
	// key, the thread's user registers and up to this much of its user
	// stack (rounded up to bpfload.NatChunk, at most bpfload.NatMaxBytes)
	// for user space to unwind (ReadNative); nothing is counted in the
	// maps. Distinct Python stacks still come through Read.
	NativeBytes int
	// Late: a command held before its exec, its interpreter not up yet.
	// The program samples the process from its first instruction and
	// counts each sample with FlagBeforePython, unwalked, until Configure
	// gives it the running interpreter. Open's layout is then the one read
	// from the command's files (pyframes.CommandLayout): fixed at load,
	// Configure adds the process's addresses; or nil, and the whole
	// configuration comes with Configure (a program the verifier checks
	// for every version: a longer load, 0.6 s against 0.1–0.3 s here).
	Late bool
}

// Sample flags (S_ in kwalk.bpf.c).
const (
	FlagComplete  = 0x1  // the chain ended at the version's outermost marker
	FlagTruncated = 0x2  // deeper than the limit, or ended elsewhere: callers missing
	FlagFault     = 0x4  // a read of user memory failed (page not present, unmapped)
	FlagInvalid   = 0x8  // a check failed (owner, code type, loop, generator state)
	FlagNoPython  = 0x10 // no thread state known for this thread
	FlagEmpty     = 0x20 // the thread state has no frame
	FlagByFSBase  = 0x40 // the thread state was found in the map by the thread's fsbase
	FlagByTLS     = 0x80 // the thread state was found through the thread's TLS/TSD
	// FlagBeforePython: taken before the walk was configured (Late), not
	// walked.
	FlagBeforePython = 0x100
)

// Frame flags (FR_ in kwalk.bpf.c).
const (
	FrameEntry     = 0x1 // entered from C
	FrameGenerator = 0x2 // owned by a generator or coroutine
)

// Frame is one Python frame as the kernel saw it.
type Frame struct {
	Code  uint64 // PyCodeObject*
	Lasti int32  // code units from co_code_adaptive (3.11+) or f_lasti (3.10)
	Flags uint32
}

// Sample is one event on one of the target's threads.
type Sample struct {
	Time    uint64 // CLOCK_MONOTONIC ns
	ID      uint64 // the stack's identity (hash of frames, verdict, code generation); 0 unless walked
	Tid     int
	Tgid    int // the thread's process
	CPU     int
	TState  uint64
	CodeGen uint64 // the code-object generation at the sample (3.14+)
	Last    uint64 // the outermost frame visited
	Flags   uint32
	Hops    int
	Frames  []Frame // innermost first
}

// Complete: the whole stack, read at the sample's instant.
func (s *Sample) Complete() bool { return s.Flags&FlagComplete != 0 }

// maxHops is pywalk.h's MAX_HOPS: frames visited per sample, shims included.
const maxHops = 512

// The state frames a walked stack without its outermost frame is folded
// under (Sample.Marker).
const (
	MarkerTruncated = "[truncated stack]" // deeper than the walker reads
	MarkerShort     = "[callers missing]" // the chain ended short of its outermost frame
)

// Marker says why a stack that is not Complete lacks its callers: it went
// deeper than MaxFrames (or maxHops frames visited), or its chain ended
// before the version's outermost frame — read while a frame was being
// linked or unlinked (a generator resumed but not yet linked to its
// caller, an evaluator entering).
func (s *Sample) Marker() string {
	if len(s.Frames) >= MaxFrames || s.Hops >= maxHops {
		return MarkerTruncated
	}
	return MarkerShort
}

// Counter slots (C_ in kwalk.bpf.c).
const (
	CSamples = iota
	CWalked
	CTruncated
	CFaulted
	CInvalid
	CNoPython
	CEmpty
	CLost
	CByFSBase
	CByTLS
	CTLSBad
	CMapStale
	CAggFull  // aggregating: a sample not counted, the count map full
	CKStack   // kernel stacks taken (KernelStacks: samples in kernel mode)
	CKLost    // kernel-mode samples whose stack's bucket held another stack
	CNatSent  // NativeBytes: samples sent with their native stack copy
	CNatLost  // NativeBytes: samples lost, the native ring full
	CNatBytes // NativeBytes: stack bytes copied, summed
	CPrePy    // Late: samples before Configure (not walked)
	CCacheHit // aggregating: samples counted in their CPU's count cache
	// CCacheRaced: samples whose cache write crossed a drain (the run
	// stalled past drainSettle): possibly missing from the drains, or
	// counted twice.
	CCacheRaced
	NCounters
)

// Counters are the kernel's counts, summed over CPUs.
type Counters [NCounters]uint64

// Walker is the loaded program, its events and its maps.
type Walker struct {
	Pid    int
	Layout *pyframes.KernelLayout
	Opts   Options
	objs   *objects
	cfg    *ebpf.Variable // Late without a layout: the program's writable configuration
	late   *ebpf.Variable // Late with a layout: the program's writable addresses
	ring   *bpfload.Ring
	nat    *bpfload.Ring // NativeBytes: the samples with their native stack copies
	fds    []int
	CPUs   int // per-CPU events opened
	// Set: the observed processes with Options.Set (nil otherwise).
	Set *procset.Set

	deadline time.Time
	urgent   bool // SetUrgent's last state
	// Known, when set, names the stacks user space holds already: Read
	// passes over their records (an aggregating walker sends a stack
	// again once its `sent` entry was evicted) without decoding them.
	Known func(id uint64) bool
	// DrainCounts' read of the per-CPU cache banks (kwalk.bpf.c's
	// struct ccbank, one per possible CPU), kept across drains.
	banks []kwalkCcbank
	// DrainCounts' batch buffers, kept across drains.
	countKeys []kwalkCountKey
	countVals []uint64
}

// Config builds the program's read-only configuration.
func Config(pid int, l *pyframes.KernelLayout, maxFrames int) (kwalkConfig, error) {
	c := kwalkConfig{
		CodeType: l.CodeType, FrameType: l.FrameType, CodegenAddr: l.CodeGenerationAddr,
		CodeAdaptive: l.CodeAdaptive, Tgid: uint32(pid), Minor: uint32(l.Version.Minor),
		MaxFrames: uint32(maxFrames), EndRule: uint32(l.End), CframeCurrent: int32(l.CFrameCurrentFrame),
		TstateFrame: uint32(l.TstateFrame), TstateBaseFrame: uint32(l.TstateBaseFrame), ObType: uint32(l.ObType),
		FramePrevious: uint32(l.FramePrevious), FrameCode: uint32(l.FrameCode), FrameInstr: uint32(l.FrameInstr),
		FrameOwner: uint32(l.FrameOwner), FrameIsEntry: int32(l.FrameIsEntry), FrameRead: uint32(l.FrameSize),
		OwnerSkip: uint32(l.OwnerSkip), OwnerMax: uint32(l.OwnerMax),
		GenStateRel: int32(l.GenStateRel), GenExecuting: int32(l.GenExecuting),
		FrameGen: uint32(l.FrameGen), CodeFlags: uint32(l.CodeFlags), CframePrevious: uint32(l.CFramePrevious),
	}
	c.TstateThreadId, c.TstateNativeTid = uint32(l.TstateThreadID), uint32(l.TstateNativeID)
	if l.FrameObjects {
		c.FrameObjects = 1
	}
	if l.CodeTagged {
		c.CodeTagged = 1
	}
	if l.CodeGenerationCreated {
		c.CodegenU32 = 1
	}
	if l.HasAttachedTLS {
		c.AttN, c.AttOff = 1, l.AttachedTLS
	}
	c.TstateInterp, c.InterpId = uint32(l.TstateInterp), uint32(l.InterpID)
	c.MainInterp = l.Interp
	c.TsLo, c.TsLen = tstateSpan(l)
	if l.CodeType == 0 {
		return c, fmt.Errorf("pid %d: no PyCode_Type address: can't check code objects", pid)
	}
	// Every field the program reads lies in the bytes it reads of a frame.
	if l.FrameSize == 0 || l.FrameSize > 128 {
		return c, fmt.Errorf("pid %d: a frame header of %d bytes does not fit the walker's 128", pid, l.FrameSize)
	}
	for _, o := range []uint64{l.FramePrevious + 8, l.FrameCode + 8, l.FrameInstr + 4, l.FrameOwner + 1, uint64(max(l.FrameIsEntry, 0)) + 1} {
		if o > l.FrameSize {
			return c, fmt.Errorf("pid %d: frame field ends at %d, past the %d bytes read", pid, o, l.FrameSize)
		}
	}
	if !l.FrameObjects && (l.FramePrevious%8 != 0 || l.FrameCode%8 != 0 || l.FrameInstr%8 != 0) {
		return c, fmt.Errorf("pid %d: frame pointer fields not 8-byte aligned (previous %d, code %d, instr %d)", pid, l.FramePrevious, l.FrameCode, l.FrameInstr)
	}
	return c, nil
}

// tstateSpan is the bytes of a thread state the walk reads at once for the
// attached state (pywalk.h struct tsview): from the lowest to the end of
// the highest of its frame, interpreter and thread-id fields; 0, 0 (read
// field by field) when one is not known, not 8-byte aligned, or the span
// is longer than the view.
func tstateSpan(l *pyframes.KernelLayout) (lo, n uint32) {
	view := uint64(len(kwalkTsview{}.W) * 8)
	offs := []uint64{l.TstateFrame, l.TstateThreadID, l.TstateNativeID, l.TstateInterp}
	first, last := slices.Min(offs), slices.Max(offs)
	for _, o := range offs {
		if o == 0 || o%8 != 0 {
			return 0, 0
		}
	}
	if last+8-first > view {
		return 0, 0
	}
	return uint32(first), uint32(last + 8 - first)
}

// walkConfig is Config with the TLS/TSD offsets where the runtime keeps
// each thread's state (at most two are tried) and the checks Open makes.
func walkConfig(pid int, l *pyframes.KernelLayout, maxFrames int, tls []int64) (kwalkConfig, error) {
	cfg, err := Config(pid, l, maxFrames)
	if err != nil {
		return cfg, err
	}
	if l.TstateThreadID == 0 {
		return cfg, fmt.Errorf("pid %d: no thread_id offset: can't check thread states", pid)
	}
	if l.HasAttachedTLS && slices.Contains(tls, l.AttachedTLS) {
		// The vote may have kept the attached state's variable (a thread
		// attached while it was read): it is not the bound one, which
		// the walk needs below a sub-interpreter's frames.
		tls = slices.DeleteFunc(slices.Clone(tls), func(o int64) bool { return o == l.AttachedTLS })
	}
	if len(tls) > len(cfg.TlsOff) {
		tls = tls[:len(cfg.TlsOff)]
	}
	copy(cfg.TlsOff[:], tls)
	cfg.TlsN = uint32(len(tls))
	return cfg, nil
}

// SameBuild compares a member process's interpreter with the target's as
// the walk sees them: layout, the same offsets and rules (the walk fits);
// addrs, also the same addresses (PyCode_Type, PyFrame_Type, the
// code-object generation), as a forked child has. A process of the same
// build at other addresses (an exec: ASLR) is walked after PutAddrs.
func SameBuild(target, member *pyframes.KernelLayout) (layout, addrs bool) {
	a, errA := Config(0, target, MaxFrames)
	b, errB := Config(0, member, MaxFrames)
	if errA != nil || errB != nil {
		return false, false
	}
	if a == b {
		return true, true
	}
	a.CodeType, a.FrameType, a.CodegenAddr, a.MainInterp = 0, 0, 0, 0
	b.CodeType, b.FrameType, b.CodegenAddr, b.MainInterp = 0, 0, 0, 0
	// The attached state's TLS offset is the process's too (a member's
	// walk checks what it finds there: a wrong one costs a read).
	a.AttN, a.AttOff, b.AttN, b.AttOff = 0, 0, 0, 0
	return a == b, false
}

// procAddrs mirrors pywalk.h's struct proc_addrs.
type procAddrs struct {
	CodeType, FrameType, CodegenAddr, MainInterp uint64
}

// PutAddrs makes the kernel walk pid with l's addresses instead of the
// target's (the rest of the layout must be the target's: SameBuild), in
// the pyaddrs map of a program that includes pywalk.h (Walker.PyAddrs).
func PutAddrs(m *ebpf.Map, pid int, l *pyframes.KernelLayout) error {
	v := procAddrs{CodeType: l.CodeType, FrameType: l.FrameType, CodegenAddr: l.CodeGenerationAddr, MainInterp: l.Interp}
	if err := m.Put(uint32(pid), v); err != nil {
		return fmt.Errorf("pid %d: can't put its interpreter's addresses in the walker's map: %w", pid, err)
	}
	return nil
}

// SetUrgent makes every new stack wake the reader at once (on: a program
// observed is starting, its code objects short-lived) or only once a
// sixteenth of the ring waits (off).
func (w *Walker) SetUrgent(on bool) error {
	if on == w.urgent {
		return nil
	}
	v := uint32(0)
	if on {
		v = 1
	}
	if err := w.objs.Urgent.Put(uint32(0), v); err != nil {
		return fmt.Errorf("pid %d: set the walker's wake-up: %w", w.Pid, err)
	}
	w.urgent = on
	return nil
}

// PyAddrs is the walker's map of members' own addresses (for Members).
func (w *Walker) PyAddrs() *ebpf.Map { return w.objs.PyAddrs }

// ProgramConfig is the value of `cfg` for another program that includes
// pywalk.h (set it with bpfload.SetVars): the walker's layout for pid,
// frames up to maxFrames (≤ MaxFrames), threads found through tls too.
func ProgramConfig(pid int, l *pyframes.KernelLayout, maxFrames int, tls []int64) (any, error) {
	if maxFrames <= 0 || maxFrames > MaxFrames {
		maxFrames = MaxFrames
	}
	cfg, err := walkConfig(pid, l, maxFrames, tls)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// Dormant is a ProgramConfig value with its version zeroed: a program
// that reads it walks nothing (written first when a running program's
// configuration is set, so that no walk sees half of it).
func Dormant(cfg any) any {
	if c, ok := cfg.(kwalkConfig); ok {
		c.Minor = 0
		return c
	}
	return cfg
}

// Open loads the walker for pid and starts sampling on every CPU. Fill
// the thread-state map with SetThreads: threads it does not know are
// counted as not-Python.
func Open(pid int, l *pyframes.KernelLayout, opt Options) (*Walker, error) {
	if opt.Freq <= 0 {
		opt.Freq = 99
	}
	if opt.MaxFrames <= 0 || opt.MaxFrames > MaxFrames {
		opt.MaxFrames = MaxFrames
	}
	if opt.RingBytes == 0 {
		opt.RingBytes = 4 << 20
	}
	if opt.RingBytes < os.Getpagesize() || opt.RingBytes&(opt.RingBytes-1) != 0 {
		return nil, fmt.Errorf("ring buffer of %d bytes: must be a power of two of at least a page", opt.RingBytes)
	}
	if opt.Latency == 0 {
		opt.Latency = 50 * time.Millisecond
	}
	var cfg kwalkConfig
	mode := atLoad
	switch {
	case l == nil && !opt.Late:
		return nil, fmt.Errorf("pid %d: no interpreter layout to walk with", pid)
	case l == nil:
		cfg, mode = kwalkConfig{Tgid: uint32(pid), MaxFrames: uint32(opt.MaxFrames)}, allLate // Minor 0: not walked yet
	default:
		if opt.Late {
			mode, opt.TLS = addrsLate, nil // the process's own come with Configure
		}
		var err error
		if cfg, err = walkConfig(pid, l, opt.MaxFrames, opt.TLS); err != nil {
			return nil, err
		}
		opt.TLS = opt.TLS[:cfg.TlsN]
	}
	opt.tune(&cfg)
	if (opt.KernelStacks || opt.NativeBytes > 0) && !opt.Aggregate {
		return nil, fmt.Errorf("pid %d: the walker takes kernel and native stacks only when it aggregates", pid)
	}
	nb := uint32(0)
	if opt.NativeBytes > 0 {
		nb = uint32(min((opt.NativeBytes+bpfload.NatChunk-1)/bpfload.NatChunk*bpfload.NatChunk, bpfload.NatMaxBytes))
	}
	o, cv, err := load(cfg, uint32(opt.RingBytes), opt.Set, opt.Aggregate, opt.KernelStacks, nb, mode)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	w := &Walker{Pid: pid, Layout: l, Opts: opt, objs: o}
	if mode == addrsLate {
		w.late = cv
	} else {
		w.cfg = cv
	}
	if w.ring, err = bpfload.NewRing("samples", o.Samples); err != nil {
		w.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if nb > 0 {
		if w.nat, err = bpfload.NewRing("natstacks", o.NatRing); err != nil {
			w.Close()
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	if opt.Set != nil {
		// Seeded and following forks before the first sample: a member
		// is sampled from its first event on.
		w.Set, err = procset.Start(procset.Handles{Procs: o.Procs, Events: o.ProcsetEvents, Counters: o.ProcsetCounters,
			Fork: o.ProcsetFork, Exec: o.ProcsetExec, Exit: o.ProcsetExit}, *opt.Set)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	if err := w.attach(); err != nil {
		w.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return w, nil
}

// tune sets what of cfg comes from the options, not the layout.
func (opt *Options) tune(cfg *kwalkConfig) {
	if opt.Latency > 0 {
		cfg.WakeBytes = uint32(opt.RingBytes / 16)
	}
	if opt.Set != nil {
		cfg.Tgid = 0 // the program filters by the set's members
	}
}

// Configure gives a Late walker its layout (the held command's
// interpreter is up) and the TLS offsets that find its threads: the
// samples from then on are walked. The running program reads its
// configuration: it is written dormant first, then whole.
func (w *Walker) Configure(l *pyframes.KernelLayout, tls []int64) error {
	if w.late != nil {
		return w.configureAddrs(l, tls)
	}
	if w.cfg == nil {
		return fmt.Errorf("pid %d: the walker was loaded with its layout (not Late)", w.Pid)
	}
	cfg, err := walkConfig(w.Pid, l, w.Opts.MaxFrames, tls)
	if err != nil {
		return err
	}
	w.Opts.tune(&cfg)
	if err := bpfload.SetLive(w.cfg, Dormant(cfg), cfg); err != nil {
		return fmt.Errorf("pid %d: %w", w.Pid, err)
	}
	w.Layout, w.Opts.TLS = l, tls[:cfg.TlsN]
	return nil
}

// ErrOtherBuild: the held command's interpreter, once up, is not the build
// its files named (it ran another one): the walker loaded with that
// layout cannot walk it.
var ErrOtherBuild = errors.New("the interpreter that came up is not the build the command's files named")

// CheckBuild: running, the interpreter a held command came up with, is
// the build read from its files; ErrOtherBuild, with both versions, if not.
func CheckBuild(pid int, read, running *pyframes.KernelLayout) error {
	if same, _ := SameBuild(read, running); !same {
		return fmt.Errorf("pid %d: %w (python %s running, python %s read)", pid, ErrOtherBuild, running.Version, read.Version)
	}
	return nil
}

// LayoutRead and LayoutOnceUp say, in a held command's report
// (flame.Meta.HeldLayout, offcpu's held_layout), where its walk's layout
// came from: the file read before its exec, or the interpreter once up
// (why: why not the file's).
func LayoutRead(path string) string { return "read from " + path + " before the exec" }

// LayoutOnceUp: see LayoutRead.
func LayoutOnceUp(why string) string { return "taken from the interpreter once up (" + why + ")" }

// configureAddrs is Configure for a walker loaded with the layout read
// from the command's files: l must be that build's; its addresses and
// TLS offsets are written ready last (bpfload.SetLive: all but ready
// first, then whole).
func (w *Walker) configureAddrs(l *pyframes.KernelLayout, tls []int64) error {
	if err := CheckBuild(w.Pid, w.Layout, l); err != nil {
		return err
	}
	cfg, err := walkConfig(w.Pid, l, w.Opts.MaxFrames, tls)
	if err != nil {
		return err
	}
	a := LateAddrs(cfg)
	if err := bpfload.SetLive(w.late, a, LateReady(a)); err != nil {
		return fmt.Errorf("pid %d: %w", w.Pid, err)
	}
	w.Layout, w.Opts.TLS = l, tls[:cfg.TlsN]
	return nil
}

// LateAddrs is the value of `late` (pywalk.h, PYWALK_ADDRS_LATE) for a
// program's walk configuration (ProgramConfig's value), not yet ready.
func LateAddrs(cfg any) any {
	c, _ := cfg.(kwalkConfig)
	return kwalklateLateAddrs{CodeType: c.CodeType, FrameType: c.FrameType, CodegenAddr: c.CodegenAddr, TlsOff: c.TlsOff, TlsN: c.TlsN,
		AttOff: c.AttOff, AttN: c.AttN, MainInterp: c.MainInterp}
}

// LateReady is a LateAddrs value with the walk on.
func LateReady(a any) any {
	l, _ := a.(kwalklateLateAddrs)
	l.Ready = 1
	return l
}

// attach opens one sampling event per CPU (any task: the program filters
// by tgid, so threads born later are sampled too) and hands it the program.
func (w *Walker) attach() error {
	config := uint64(unix.PERF_COUNT_SW_TASK_CLOCK)
	if w.Opts.Clock == CPUClock {
		config = unix.PERF_COUNT_SW_CPU_CLOCK
	}
	fds, err := bpfload.AttachPerCPU(w.objs.Prog, config, w.Opts.Freq, w.Opts.Clock.String())
	w.fds = fds
	w.CPUs = len(fds)
	return err
}

// SetThreads makes the thread-state map exactly refs: each thread state
// under its kernel tid (3.11+) and its pthread_t (== the thread's fsbase
// on x86_64 glibc and musl, so 3.10 threads are found too). The kernel
// checks every hit (native_thread_id == tid, thread_id == fsbase): an
// entry left by a thread whose tid or stack was reused is counted
// (CMapStale) and ignored.
func (w *Walker) SetThreads(refs []pyframes.ThreadRef) error {
	return FillThreads(w.objs.Tstates, w.Pid, refs)
}

// FillThreads makes m — the tstates map of a program that includes
// pywalk.h — exactly refs, as SetThreads does for the walker's own.
func FillThreads(m *ebpf.Map, pid int, refs []pyframes.ThreadRef) error {
	// A thread with states in several interpreters (it runs a
	// sub-interpreter's code) is keyed to the one of the lowest
	// interpreter id, the one it started in: its bound state, whose
	// frames called into the others (the kernel puts the attached
	// state's frames on top).
	want := map[uint64]uint64{}
	wantInterp := map[uint64]int64{}
	put := func(k uint64, r pyframes.ThreadRef) {
		if id, ok := wantInterp[k]; !ok || r.Interp < id {
			want[k], wantInterp[k] = r.Addr, r.Interp
		}
	}
	for _, r := range refs {
		if r.NativeID > 0 {
			put(uint64(r.NativeID), r)
		}
		if r.ThreadID != 0 {
			put(r.ThreadID, r)
		}
	}
	var k, v uint64
	var stale []uint64
	have := map[uint64]bool{}
	it := m.Iterate()
	for it.Next(&k, &v) {
		if nv, ok := want[k]; !ok || nv != v {
			stale = append(stale, k)
		} else {
			have[k] = true // already right: no write
		}
	}
	for _, k := range stale {
		_ = m.Delete(k)
	}
	for k, v := range want {
		if have[k] {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("pid %d: can't put thread 0x%x -> tstate 0x%x: %w", pid, k, v, err)
		}
	}
	return nil
}

// SetDeadline makes Read return os.ErrDeadlineExceeded after t, once
// every sample of before t is read.
func (w *Walker) SetDeadline(t time.Time) { w.deadline = t }

// Wake makes a Read that waits return os.ErrDeadlineExceeded now (after
// the samples already there): a process of the set changed its program,
// and its reader should be opened while it starts (procset.Set.OnChange).
func (w *Walker) Wake() { w.ring.Wake() }

// Read blocks for the next sample; io.EOF once the walker is closed.
func (w *Walker) Read() (Sample, error) {
	for {
		d := w.deadline
		if w.Opts.Latency > 0 && w.ring.Pending() == 0 {
			// The poll period: samples the kernel did not wake us for are
			// read at least this often.
			if p := time.Now().Add(w.Opts.Latency); d.IsZero() || p.Before(d) {
				d = p
			}
		}
		b, ok, err := w.ring.Next(d)
		if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return Sample{}, io.EOF
		}
		if errors.Is(err, bpfload.ErrWoken) {
			return Sample{}, os.ErrDeadlineExceeded // Wake: the reader's look comes now
		}
		if err != nil {
			return Sample{}, fmt.Errorf("pid %d: %w", w.Pid, err)
		}
		if ok {
			if w.Known != nil && len(b) >= hdrSize {
				// The id is the header's second word (struct sample_hdr).
				if id := binary.NativeEndian.Uint64(b[8:16]); id != 0 && w.Known(id) {
					continue
				}
			}
			return Decode(b)
		}
		if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
			return Sample{}, os.ErrDeadlineExceeded
		}
	}
}

// Count is one (stack, thread, verdict) of the aggregated samples.
type Count struct {
	ID    uint64 // the stack's hash (0: no frames were walked)
	Tgid  int
	Tid   int
	Flags uint32 // the walk's verdict (FlagComplete … FlagEmpty)
	N     uint64 // samples
	// KStack (Options.KernelStacks): the kernel stack's id + 1; 0: the
	// samples hit user mode; KStackLost: in kernel mode, stack not kept.
	KStack uint32
}

// KStackLost is Count.KStack of kernel-mode samples whose stack the map
// could not keep (its bucket held another stack).
const KStackLost = ^uint32(0)

// kstackDepth is a kernel stack's depth in the map (kwalk.bpf.c kstacks).
const kstackDepth = 64

// KernelStack is the kernel call chain of Count.KStack k (k > 0, not
// KStackLost), innermost first.
func (w *Walker) KernelStack(k uint32) ([]uint64, error) {
	if k == 0 || k == KStackLost {
		return nil, fmt.Errorf("pid %d: no kernel stack %#x", w.Pid, k)
	}
	var st [kstackDepth]uint64
	if err := w.objs.KStacks.Lookup(k-1, &st); err != nil {
		return nil, fmt.Errorf("pid %d: kernel stack %d: %w", w.Pid, k-1, err)
	}
	n := 0
	for n < len(st) && st[n] != 0 {
		n++
	}
	return append([]uint64(nil), st[:n]...), nil
}

// drainSettle is how long DrainCounts waits after moving the generation
// on: a program that picked the old map and bank before is done by then
// (it runs in microseconds, in interrupt context, without sleeping). A
// run stalled longer (a vCPU descheduled) still adds to the old map for
// the drain two generations on (late, not lost); one that writes the old
// bank once its read has begun counts its samples in CCacheRaced.
const drainSettle = time.Millisecond

// DrainCounts (Aggregate) moves the kernel's counts to fn and empties
// them: it moves the program's generation on (the other count map and
// cache bank), waits for the runs still on the old ones, then reads the
// old bank's entries of the generation drained (the programs overwrite
// them, unread, two generations on) and reads and deletes the old map's
// entries. Read the ring first: a count's stack was sent before it was
// counted.
func (w *Walker) DrainCounts(fn func(Count)) error {
	if !w.Opts.Aggregate {
		return fmt.Errorf("pid %d: the walker does not aggregate", w.Pid)
	}
	var cur uint32
	if err := w.objs.Sel.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("pid %d: can't read the walker's count generation: %w", w.Pid, err)
	}
	if err := w.objs.Sel.Put(uint32(0), cur+1); err != nil {
		return fmt.Errorf("pid %d: can't move the walker's count generation on: %w", w.Pid, err)
	}
	time.Sleep(drainSettle)
	// A run that writes the old bank from now on counts itself raced.
	if err := w.objs.Sel.Put(uint32(1), cur+1); err != nil {
		return fmt.Errorf("pid %d: can't mark the walker's count cache read: %w", w.Pid, err)
	}
	return errors.Join(w.drainCache(cur, fn), w.drainMap(cur, fn))
}

// drainMap reads and deletes the count map of generation gen.
func (w *Walker) drainMap(gen uint32, fn func(Count)) error {
	m := w.objs.Counts0
	if gen&1 == 1 {
		m = w.objs.Counts1
	}
	if w.countKeys == nil {
		w.countKeys, w.countVals = make([]kwalkCountKey, 512), make([]uint64, 512)
	}
	keys, vals := w.countKeys, w.countVals
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		for i := range n {
			fn(countOf(keys[i], vals[i]))
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pid %d: can't read the walker's counts (generation %d): %w", w.Pid, gen, err)
		}
	}
}

// drainCache hands fn the counts of generation gen that the CPUs' caches
// hold (its bank, no longer written).
func (w *Walker) drainCache(gen uint32, fn func(Count)) error {
	if w.banks == nil {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return fmt.Errorf("pid %d: can't count the possible CPUs: %w", w.Pid, err)
		}
		w.banks = make([]kwalkCcbank, n)
	}
	if err := w.objs.CCache.Lookup(gen&1, w.banks); err != nil {
		return fmt.Errorf("pid %d: can't read the walker's count cache (bank %d): %w", w.Pid, gen&1, err)
	}
	for c := range w.banks {
		for _, e := range &w.banks[c].E {
			if e.N != 0 && e.Gen == gen {
				fn(countOf(e.K, uint64(e.N)))
			}
		}
	}
	return nil
}

// countOf is the count n of key k.
func countOf(k kwalkCountKey, n uint64) Count {
	return Count{ID: k.Id, Tgid: int(k.Tgid), Tid: int(k.Tid), Flags: k.Flags, N: n, KStack: k.Kstack}
}

// NativeSample is one sample with its native stack copy (NativeBytes):
// its count key, as DrainCounts would have counted it, and the copy.
type NativeSample struct {
	Count // N is 1
	Head  bpfload.NatHead
	Stack []byte   // aliases the ring's record: valid during the callback only
	Links []uint64 // the Python runs' C-stack links (3.12+), innermost first
}

// ReadNative hands fn every sample waiting with its native stack copy,
// without waiting (the same NativeSample each time: fn must not keep it
// or its slices); it returns how many.
func (w *Walker) ReadNative(fn func(*NativeSample)) (int, error) {
	if w.nat == nil {
		return 0, fmt.Errorf("pid %d: the walker copies no native stacks", w.Pid)
	}
	past := time.Unix(0, 0)
	n := 0
	var ns NativeSample // one for every record: fn must not keep it
	for {
		b, ok, err := w.nat.Next(past)
		if err != nil {
			return n, fmt.Errorf("pid %d: read the native stacks: %w", w.Pid, err)
		}
		if !ok {
			return n, nil
		}
		h, stack, err := bpfload.DecodeNat(b)
		if err != nil {
			return n, fmt.Errorf("pid %d: %w", w.Pid, err)
		}
		n++
		ns.Count = Count{ID: h.Id, Tgid: int(h.Tgid), Tid: int(h.Tid), Flags: h.Flags, N: 1, KStack: h.Kstack}
		ns.Head, ns.Stack = h, stack
		ns.Links = ns.Head.Links[:h.Nlinks]
		fn(&ns)
	}
}

// Pending is how many bytes of samples wait in the ring.
func (w *Walker) Pending() int { return w.ring.Pending() }

const hdrSize = int(unsafe.Sizeof(kwalkSampleHdr{}))
const frameSize = int(unsafe.Sizeof(kwalkFrame{}))

// Decode reads one record of struct sample (pywalk.h) as a program that
// includes the walker sends it.
func Decode(b []byte) (Sample, error) {
	h, err := bpfload.Decode[kwalkSampleHdr](b)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Time: h.Time, ID: h.Id, TState: h.Tstate, CodeGen: h.Codegen, Last: h.Last,
		Tid: int(h.Tid), Tgid: int(h.Tgid), Flags: h.Flags, Hops: int(h.Hops), CPU: int(h.Cpu)}
	depth := int(h.Depth)
	if len(b) < hdrSize+depth*frameSize {
		return s, fmt.Errorf("sample of tid %d: %d bytes for %d frames", s.Tid, len(b), depth)
	}
	s.Frames = make([]Frame, depth)
	for i := range s.Frames {
		f, err := bpfload.Decode[kwalkFrame](b[hdrSize+i*frameSize:])
		if err != nil {
			return s, err
		}
		s.Frames[i] = Frame{Code: f.Code, Lasti: f.Lasti, Flags: f.Flags}
	}
	return s, nil
}

// Counters sums the per-CPU counters.
func (w *Walker) Counters() (Counters, error) {
	var out Counters
	n, err := bpfload.Counters(w.objs.Counters, NCounters)
	if err != nil {
		return out, fmt.Errorf("pid %d: %w", w.Pid, err)
	}
	copy(out[:], n)
	return out, nil
}

// RunStats is the kernel's account of the program's runs (zero unless
// bpf stats are enabled: bpfload.EnableStats or sysctl kernel.bpf_stats_enabled).
func (w *Walker) RunStats() (runtime time.Duration, runs uint64, err error) {
	st, err := w.objs.Prog.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("pid %d: can't read program stats: %w", w.Pid, err)
	}
	return st.Runtime, st.RunCount, nil
}

// Stop disables the events: no new samples; what is in the ring stays readable.
func (w *Walker) Stop() {
	for _, fd := range w.fds {
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
}

// Close detaches and frees everything (the set's account stays readable).
func (w *Walker) Close() error {
	if w.Set != nil {
		w.Set.Close()
	}
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.fds = nil
	if w.ring != nil {
		w.ring.Close()
	}
	if w.nat != nil {
		w.nat.Close()
	}
	if w.objs != nil {
		w.objs.Close()
	}
	return nil
}
