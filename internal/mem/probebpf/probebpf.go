//go:build amd64

package probebpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// Counter slots (C_ in alloc.bpf.c).
const (
	CCalls = iota
	CTracked
	CLiveAdded
	CFrees
	CFreed
	CNull
	CDropPend
	CDropLive
	CDropLiveEst
	CReplaced
	CUnpaired
	CLiveEst
	CLiveN
	CPyWalked
	CPyTrunc
	CPyFault
	CPyInvalid
	CPyNoPy
	CPyEmpty
	CPyNew
	CPyLost
	CNatSent
	CNatLost
	CNatBytes
	NCounters
)

// MaxNativeBytes is the most user stack one tracked call copies (NAT_STACK).
const MaxNativeBytes = bpfload.NatMaxBytes

// nativeChunk: the copy is read in pieces of this size (NAT_CHUNK).
const nativeChunk = 1024

// Live is one tracked allocation still alive (the lives map's value).
type Live = allocLive

// The allocator functions probed, by role, in one of two layers — never
// both, a call would be seen twice. Where the symbol table has them (not
// stripped builds), pymalloc's own functions: PyObject_* and PyMem_* reach
// them through the allocator hooks (_PyObject.malloc, _PyMem.malloc),
// indirect calls that no build can inline. Otherwise the exported entry
// points (.dynsym), which a build may inline into its callers. The
// PyMem_Raw* family is not probed: pymalloc hands its large blocks to it
// (they would be seen twice) and what else uses it is the runtime's own
// bookkeeping.
type layer struct {
	alloc, calloc, realloc, free []string
}

var (
	pymalloc = layer{[]string{"_PyObject_Malloc"}, []string{"_PyObject_Calloc"}, []string{"_PyObject_Realloc"}, []string{"_PyObject_Free"}}
	exported = layer{[]string{"PyObject_Malloc", "PyMem_Malloc"}, []string{"PyObject_Calloc", "PyMem_Calloc"},
		[]string{"PyObject_Realloc", "PyMem_Realloc"}, []string{"PyObject_Free", "PyMem_Free"}}
)

func (l layer) all() []string {
	return append(append(append(append([]string{}, l.alloc...), l.calloc...), l.realloc...), l.free...)
}

// ErrUnavailable wraps every reason the probes could not be set.
var ErrUnavailable = errors.New("allocator probes unavailable")

// Config of one load.
type Config struct {
	Pid int
	// Tid: the thread the probes are opened on (0: Pid). The kernel fires
	// them for its memory, and refuses a zombie.
	Tid         int
	Binary      string // the ELF that holds the allocators, openable by pyobs (e.g. under /proc/PID/root)
	Layout      *pyframes.KernelLayout
	TLS         []int64 // the thread-state TLS offsets (pyframes.TLSOffsets), nil: the map only
	MaxFrames   int
	SampleBytes uint64 // track a call of s bytes with probability s/SampleBytes (<= 1: every call)
	// LibC: the C library the target maps (openable by pyobs), "": none.
	// On a build that inlines its allocator (Probes.Inlined) its free is
	// probed too: large blocks freed from inlined code end there.
	LibC        string
	LiveEntries uint32 // 0: the object's size
	// NativeBytes: user stack copied per tracked call for its native
	// stack (0: none; rounded up to 1 KiB, at most MaxNativeBytes).
	NativeBytes int
}

// Probes are the loaded programs, their maps and the attached uprobes.
type Probes struct {
	Lives    *ebpf.Map
	Tstates  *ebpf.Map
	Counters *ebpf.Map
	Ring     *bpfload.Ring
	NatRing  *bpfload.Ring // the native stack copies (NatRec), nil without NativeBytes
	Probed   []string      // symbols probed
	Missing  []string      // symbols the ELF lacks (their calls are not seen)
	// Inlined: PyObject_Free holds the allocator's body (a link-time
	// optimised build: the same body is inlined into callers, whose calls
	// and frees no probe sees).
	Inlined bool
	// Tid is the thread the probes are open on: the kernel fires them
	// for its memory only while it lives (its exit ends them: Reopen).
	Tid   int
	pid   int
	objs  allocObjects
	plan  []probe // in the order they are opened
	links []link.Link
	// closing: the probes on a thread that ended, being closed (Reopen)
	closing sync.WaitGroup
}

// probe is one uprobe (or uretprobe) of the plan: prog on sym of an
// executable (the C library's: libc).
type probe struct {
	exe  *link.Executable
	file string
	sym  string
	prog *ebpf.Program
	ret  bool
	libc bool
}

// open opens the plan's probes on thread tid; on an error none stays.
func (p *Probes) open(tid int, plan []probe) ([]link.Link, error) {
	o := &link.UprobeOptions{PID: tid}
	var ls []link.Link
	for _, pr := range plan {
		var l link.Link
		var err error
		what := "uprobe"
		if pr.ret {
			what = "uretprobe"
			l, err = pr.exe.Uretprobe(pr.sym, pr.prog, o)
		} else {
			l, err = pr.exe.Uprobe(pr.sym, pr.prog, o)
		}
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("%w: pid %d: can't attach a %s to %s in %s on thread %d: %w", ErrUnavailable, p.pid, what, pr.sym, pr.file, tid, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Reopen opens the probes on thread tid of the process and then closes
// those on the thread before: after that thread ended, the probes fire
// again (the maps, and the counts in them, go on). binary and libc are
// Config's files as pyobs opens them now (through tid: the paths through
// a thread that ended resolve no more).
func (p *Probes) Reopen(tid int, binary, libc string) error {
	ex, err := link.OpenExecutable(binary)
	if err != nil {
		return fmt.Errorf("%w: pid %d: can't open %s: %w", ErrUnavailable, p.pid, binary, err)
	}
	var lc *link.Executable
	plan := make([]probe, len(p.plan))
	for i, pr := range p.plan {
		pr.exe, pr.file = ex, binary
		if pr.libc {
			if lc == nil {
				if libc == "" {
					return fmt.Errorf("%w: pid %d: no C library to probe free in", ErrUnavailable, p.pid)
				}
				if lc, err = link.OpenExecutable(libc); err != nil {
					return fmt.Errorf("%w: pid %d: can't open %s: %w", ErrUnavailable, p.pid, libc, err)
				}
			}
			pr.exe, pr.file = lc, libc
		}
		plan[i] = pr
	}
	ls, err := p.open(tid, plan)
	if err != nil {
		return err
	}
	// The old probes fire no more; closing a uprobe waits for a grace
	// period (~0.1 s each here): off the window's path.
	old := p.links
	p.links, p.Tid, p.plan = ls, tid, plan
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		for _, l := range old {
			l.Close()
		}
	}()
	return nil
}

// Load loads the programs and attaches them to the allocators of
// cfg.Binary for cfg.Pid only: frees first, then each allocator's return
// and last its entry, so no call is half-seen. Any error: nothing stays
// attached.
func Load(cfg Config) (*Probes, error) {
	if err := bpfload.CheckPidNS(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	wc, err := kwalk.Config(cfg.Pid, cfg.Layout, cfg.MaxFrames)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if cfg.Layout.TstateThreadID == 0 {
		return nil, fmt.Errorf("%w: pid %d: no thread_id offset: can't check thread states", ErrUnavailable, cfg.Pid)
	}
	n := copy(wc.TlsOff[:], cfg.TLS)
	wc.TlsN = uint32(n)
	have, err := symbols(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	ly := exported
	if hasAll(have, pymalloc.all()) {
		ly = pymalloc
	}
	for _, s := range []string{ly.alloc[0], ly.free[0]} {
		if _, ok := have[s]; !ok {
			return nil, fmt.Errorf("%w: pid %d: %s has no symbol %s (neither .symtab nor .dynsym)", ErrUnavailable, cfg.Pid, cfg.Binary, s)
		}
	}
	var specs allocSpecs
	spec, err := bpfload.Spec(loadAlloc, &specs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var hook uint8
	if ly.alloc[0] == pymalloc.alloc[0] {
		hook = 1 // (void *ctx, ...): pymalloc's hook targets
	}
	sb := cfg.SampleBytes
	if sb < 1 {
		sb = 1
	}
	if err := bpfload.SetVars(bpfload.Var{Spec: specs.Cfg, Value: wc}, bpfload.Var{Spec: specs.TargetTgid, Value: uint32(cfg.Pid)},
		bpfload.Var{Spec: specs.SampleBytes, Value: sb}, bpfload.Var{Spec: specs.HookAbi, Value: hook}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if cfg.LiveEntries > 0 {
		specs.Lives.MaxEntries = cfg.LiveEntries
	}
	nb := uint32(0)
	if cfg.NativeBytes > 0 {
		nb = uint32(min((cfg.NativeBytes+nativeChunk-1)/nativeChunk*nativeChunk, MaxNativeBytes))
	} else {
		specs.Natstacks.MaxEntries = uint32(os.Getpagesize()) // the smallest ring: nothing goes through it
	}
	if err := bpfload.SetVars(bpfload.Var{Spec: specs.NativeBytes, Value: nb}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p := &Probes{}
	if err := bpfload.Load("mem's allocator uprobes", spec, &p.objs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p.Lives, p.Tstates, p.Counters = p.objs.Lives, p.objs.Tstates, p.objs.Counters
	if p.Ring, err = bpfload.NewRing("pystacks", p.objs.Pystacks); err != nil {
		p.Close()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if nb > 0 {
		if p.NatRing, err = bpfload.NewRing("natstacks", p.objs.Natstacks); err != nil {
			p.Close()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	ex, err := link.OpenExecutable(cfg.Binary)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("%w: pid %d: can't open %s: %w", ErrUnavailable, cfg.Pid, cfg.Binary, err)
	}
	p.Tid = cfg.Tid
	if p.Tid == 0 {
		p.Tid = cfg.Pid
	}
	p.pid = cfg.Pid
	o2 := p.objs
	type role struct {
		syms  []string
		enter *ebpf.Program
		ret   bool
	}
	for _, r := range []role{{ly.free, o2.FreeEnter, false}, {ly.alloc, o2.AllocEnter, true}, {ly.calloc, o2.CallocEnter, true}, {ly.realloc, o2.ReallocEnter, true}} {
		for _, s := range r.syms {
			if _, ok := have[s]; !ok {
				p.Missing = append(p.Missing, s)
				continue
			}
			if r.ret {
				p.plan = append(p.plan, probe{ex, cfg.Binary, s, o2.AllocExit, true, false})
			}
			p.plan = append(p.plan, probe{ex, cfg.Binary, s, r.enter, false, false})
			p.Probed = append(p.Probed, s)
		}
	}
	// A thin PyObject_Free is a call through the allocator hook (tens of
	// bytes); hundreds of bytes mean pymalloc's body was inlined into it.
	if ly.free[0] == "PyObject_Free" && have["PyObject_Free"] > inlinedSize {
		p.Inlined = true
		if cfg.LibC != "" {
			lc, err := link.OpenExecutable(cfg.LibC)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("%w: pid %d: can't open %s: %w", ErrUnavailable, cfg.Pid, cfg.LibC, err)
			}
			p.plan = append(p.plan, probe{lc, cfg.LibC, "free", o2.FreeEnter, false, true})
			p.Probed = append(p.Probed, "free (libc)")
		}
	}
	if p.links, err = p.open(p.Tid, p.plan); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// inlinedSize: a PyObject_Free bigger than this holds the allocator's body.
const inlinedSize = 64

// symbols lists the defined function symbols of path among the probed
// ones, with their sizes.
func symbols(path string) (map[string]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("can't open ELF %s: %w", path, err)
	}
	defer f.Close()
	want := map[string]bool{}
	for _, s := range append(pymalloc.all(), exported.all()...) {
		want[s] = true
	}
	have := map[string]uint64{}
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil {
			continue // a stripped file has no .symtab
		}
		for _, s := range syms {
			if want[s.Name] && s.Value != 0 && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				have[s.Name] = max(have[s.Name], s.Size)
			}
		}
	}
	return have, nil
}

// SetThreads makes the thread-state map exactly refs (kwalk.FillThreads).
func (p *Probes) SetThreads(pid int, refs []pyframes.ThreadRef) error {
	return kwalk.FillThreads(p.Tstates, pid, refs)
}

// Stop ends the window at ns (CLOCK_MONOTONIC): later calls change
// nothing, so the maps hold the state at ns.
func (p *Probes) Stop(ns uint64) error {
	if err := p.objs.StopNs.Set(ns); err != nil {
		return fmt.Errorf("can't set stop_ns: %w", err)
	}
	return nil
}

// Detach removes every uprobe; the maps stay readable.
func (p *Probes) Detach() {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	p.closing.Wait()
}

// Close detaches and frees everything.
func (p *Probes) Close() {
	p.Detach()
	if p.Ring != nil {
		p.Ring.Close()
		p.Ring = nil
	}
	if p.NatRing != nil {
		p.NatRing.Close()
		p.NatRing = nil
	}
	p.objs.Close()
}

// ReadCounters sums the per-CPU counters.
func (p *Probes) ReadCounters() ([NCounters]uint64, error) {
	var out [NCounters]uint64
	n, err := bpfload.Counters(p.Counters, NCounters)
	if err != nil {
		return out, err
	}
	copy(out[:], n)
	return out, nil
}

func hasAll(have map[string]uint64, syms []string) bool {
	for _, s := range syms {
		if _, ok := have[s]; !ok {
			return false
		}
	}
	return true
}

// Missed sums the programs' recursion misses: probe hits whose program the
// kernel skipped because a BPF program was already running on that CPU
// (their calls are not seen).
func (p *Probes) Missed() uint64 {
	var n uint64
	for _, pr := range []*ebpf.Program{p.objs.AllocEnter, p.objs.CallocEnter, p.objs.ReallocEnter, p.objs.AllocExit, p.objs.FreeEnter} {
		if pr == nil {
			continue
		}
		if st, err := pr.Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}
