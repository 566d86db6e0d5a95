package tracepoint

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
	"github.com/pyobs/pyobs/internal/procfs"
)

//go:generate sh -c "clang -target bpf -O2 -g -Wall -fdebug-prefix-map=$DOLLAR(pwd)=. -c syscalls.bpf.c -o syscalls.bpf.o"

//go:embed syscalls.bpf.o
var object []byte

// MaxNr bounds the syscall numbers the programs count (x86_64 has < 512).
const MaxNr = 512

// Counter indexes (syscalls.bpf.c).
const (
	dropEvents = 0
	dropHist   = 1
	dropErrno  = 2
	dropStarts = 3
	restarted  = 4
	nCounters  = 8
)

// PyOffsets tell the kernel program how to find a thread's innermost Python
// frame (the numbers of pyframes.Layout, 3.11+).
type PyOffsets struct {
	TstateFrame   uint64
	CFrameCurrent int64 // -1: the tstate points to the frame itself (3.13+)
	FramePrevious uint64
	FrameCode     uint64
	FrameInstr    uint64
	FrameOwner    uint64
	OwnerSkip     uint8
	// The thread-list walk for threads user space has not mapped (3.11+:
	// NativeTid != 0): &_PyRuntime and the offsets to the main
	// interpreter's first thread state, its next link and native id.
	Runtime, RuntimeInterpHead, InterpThreadsHead, TstateNext, TstateNativeTid uint64
}

// Config says what to trace.
type Config struct {
	Pid    int           // thread group to count
	Slow   time.Duration // events for calls at least this slow (failing calls always)
	Filter map[int]bool  // nil: every syscall
	Py     *PyOffsets    // nil: no frame capture
	// Threads: tid → PyThreadState* known before the programs attach.
	Threads map[int]uint64
	// Limits override the maps' sizes (0: the object file's): tests use
	// them to fill a map on purpose.
	RingBytes, HistEntries, ErrnoEntries uint32
}

// Tracer is a loaded and attached pair of programs.
type Tracer struct {
	coll  *ebpf.Collection
	links []link.Link
	rd    *ringbuf.Reader
	rec   ringbuf.Record
}

// Open loads the programs for cfg and attaches them. The error says which
// step failed (load, map, attach) and wraps the kernel's errno.
func Open(cfg Config) (*Tracer, error) {
	if err := initPidNS(); err != nil {
		return nil, err
	}
	_ = rlimit.RemoveMemlock() // kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(object))
	if err != nil {
		return nil, fmt.Errorf("parse syscalls.bpf.o: %w", err)
	}
	set := map[string]any{
		"target_tgid": uint32(cfg.Pid),
		"slow_ns":     uint64(max(cfg.Slow, 0)),
	}
	if cfg.Filter != nil {
		set["use_filter"] = uint32(1)
	}
	if p := cfg.Py; p != nil {
		set["py_capture"] = uint32(1)
		set["off_tstate_frame"] = p.TstateFrame
		set["off_cframe_current"] = p.CFrameCurrent
		set["off_frame_previous"] = p.FramePrevious
		set["off_frame_code"] = p.FrameCode
		set["off_frame_instr"] = p.FrameInstr
		set["off_frame_owner"] = p.FrameOwner
		set["owner_skip"] = uint32(p.OwnerSkip)
		set["runtime_addr"] = p.Runtime
		set["off_runtime_interp_head"] = p.RuntimeInterpHead
		set["off_interp_threads_head"] = p.InterpThreadsHead
		set["off_tstate_next"] = p.TstateNext
		set["off_tstate_native_tid"] = p.TstateNativeTid
	}
	for name, v := range set {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("syscalls.bpf.o has no variable %s", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	for name, n := range map[string]uint32{"events": cfg.RingBytes, "hist": cfg.HistEntries, "errnos": cfg.ErrnoEntries} {
		if n != 0 {
			spec.Maps[name].MaxEntries = n
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load BPF programs sys_enter/sys_exit: %w", err)
	}
	t := &Tracer{coll: coll}
	if err := t.SetThreads(cfg.Threads); err != nil {
		t.Close()
		return nil, err
	}
	if cfg.Filter != nil {
		m := coll.Maps["filter"]
		for nr, on := range cfg.Filter {
			if on && nr >= 0 && nr < MaxNr {
				if err := m.Put(uint32(nr), uint32(1)); err != nil {
					t.Close()
					return nil, fmt.Errorf("BPF map filter[%d]: %w", nr, err)
				}
			}
		}
	}
	t.rd, err = ringbuf.NewReader(coll.Maps["events"])
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("BPF ring buffer events: %w", err)
	}
	// Exit first: an enter without its exit program would only fill the
	// LRU map; an exit without enter is ignored.
	for _, name := range []string{"sys_exit", "sys_enter"} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: coll.Programs[name]})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("attach BPF program to raw tracepoint %s: %w", name, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// Close detaches the programs and frees the maps.
func (t *Tracer) Close() {
	for _, l := range t.links {
		_ = l.Close()
	}
	t.links = nil
	if t.rd != nil {
		_ = t.rd.Close()
	}
	t.coll.Close()
}

// Detach stops counting (the maps stay readable).
func (t *Tracer) Detach() {
	for _, l := range t.links {
		_ = l.Close()
	}
	t.links = nil
}

// SetThreads tells the program which thread state each tid has; every
// other entry (a thread that ended, or one the program found itself) is
// removed, so a reused tid never keeps a stale thread state for long.
func (t *Tracer) SetThreads(m map[int]uint64) error {
	mp := t.coll.Maps["tstates"]
	var k uint32
	var v uint64
	var gone []uint32
	it := mp.Iterate()
	for it.Next(&k, &v) {
		if ts, ok := m[int(k)]; !ok || ts != v {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		_ = mp.Delete(k)
	}
	for tid, ts := range m {
		if err := mp.Put(uint32(tid), ts); err != nil {
			return fmt.Errorf("BPF map tstates[%d]: %w", tid, err)
		}
	}
	return nil
}

// Py says what the kernel found of the calling thread's Python frame.
type Py uint32

const (
	PyNoThreadState Py = 0 // tid not (yet) in the tstate map
	PyCaptured      Py = 1
	PyFault         Py = 2 // a user-memory read faulted (page not present)
	PyNoFrame       Py = 3 // the thread runs no Python code
	PyOff           Py = 4 // capture not configured
)

// Event is one slow or failing call.
type Event struct {
	EnterNs uint64 // CLOCK_MONOTONIC
	Dur     time.Duration
	Ret     int64
	Tid     int
	Nr      int
	Frame   uint64 // innermost _PyInterpreterFrame*, when Py == PyCaptured
	Code    uint64 // its f_code/f_executable as stored (tag bits included)
	Instr   uint64 // its prev_instr/instr_ptr
	Py      Py
	Walked  bool   // the kernel found the thread state by walking the thread list
	Tstate  uint64 // the thread's PyThreadState*, when Py == PyCaptured
}

// EventSize is the size of struct event in syscalls.bpf.c.
const EventSize = 72

// DecodeEvent parses one ring-buffer record.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) < EventSize {
		return Event{}, fmt.Errorf("BPF event of %d bytes, want %d", len(b), EventSize)
	}
	le := binary.LittleEndian
	e := Event{
		EnterNs: le.Uint64(b[0:]),
		Dur:     time.Duration(le.Uint64(b[8:])),
		Ret:     int64(le.Uint64(b[16:])),
		Tid:     int(le.Uint32(b[24:])),
		Nr:      int(le.Uint32(b[28:])),
		Frame:   le.Uint64(b[32:]),
		Code:    le.Uint64(b[40:]),
		Instr:   le.Uint64(b[48:]),
		Py:      Py(le.Uint32(b[56:])),
		Walked:  le.Uint32(b[60:]) != 0,
		Tstate:  le.Uint64(b[64:]),
	}
	if e.Nr >= MaxNr || e.Py > PyOff || e.Dur < 0 {
		return Event{}, fmt.Errorf("BPF event out of range: nr %d py %d dur %d", e.Nr, e.Py, e.Dur)
	}
	return e, nil
}

// ReadEvents hands events to fn until the deadline, even while more keep
// coming (the caller must get to check its own clock); a zero deadline
// drains what is there now (after Detach: everything).
func (t *Tracer) ReadEvents(deadline time.Time, fn func(Event)) error {
	drain := deadline.IsZero()
	if drain {
		deadline = time.Now()
	}
	t.rd.SetDeadline(deadline)
	for n := 1; ; n++ {
		if !drain && n%64 == 0 && time.Now().After(deadline) {
			return nil
		}
		err := t.rd.ReadInto(&t.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("BPF ring buffer events: %w", err)
		}
		e, err := DecodeEvent(t.rec.RawSample)
		if err != nil {
			return err
		}
		fn(e)
	}
}

// NrStat is the kernel's account of one syscall number.
type NrStat struct {
	Nr            int
	Calls, Errors uint64
	Total         time.Duration
	Max, Min      time.Duration
	Hist          map[int]uint64 // trace.Hist bucket → calls
	Errnos        map[int]uint64 // errno → calls
}

// Counters are what the programs could not keep or chose not to count.
type Counters struct {
	EventsDropped uint64 // slow/failing calls whose event found the ring buffer full
	HistDropped   uint64 // calls missing from their histogram (map full)
	ErrnoDropped  uint64 // errors missing from their errno count (map full)
	StartsDropped uint64 // enters not recorded (their call is not counted)
	Restarted     uint64 // interrupted calls the kernel restarts (not counted)
}

// kstat mirrors struct stat in syscalls.bpf.c.
type kstat struct {
	Calls, Errors, TotalNs, MaxNs, MinNs uint64
}

// Read returns every syscall number with calls and the counters.
func (t *Tracer) Read() ([]NrStat, Counters, error) {
	var out []NrStat
	idx := map[int]int{}
	var per []kstat
	var key uint32
	it := t.coll.Maps["stats"].Iterate()
	for it.Next(&key, &per) {
		var s NrStat
		for i, c := range per {
			if c.Calls == 0 {
				continue
			}
			if s.Calls == 0 || time.Duration(c.MinNs) < s.Min {
				s.Min = time.Duration(c.MinNs)
			}
			s.Calls += c.Calls
			s.Errors += c.Errors
			s.Total += time.Duration(c.TotalNs)
			s.Max = max(s.Max, time.Duration(c.MaxNs))
			_ = i
		}
		if s.Calls == 0 {
			continue
		}
		s.Nr = int(key)
		s.Hist, s.Errnos = map[int]uint64{}, map[int]uint64{}
		idx[s.Nr] = len(out)
		out = append(out, s)
	}
	if err := it.Err(); err != nil {
		return nil, Counters{}, fmt.Errorf("BPF map stats: %w", err)
	}
	for _, m := range []struct {
		name string
		hist bool
	}{{"hist", true}, {"errnos", false}} {
		var k uint32
		var v uint64
		it := t.coll.Maps[m.name].Iterate()
		for it.Next(&k, &v) {
			i, ok := idx[int(k>>12)]
			if !ok {
				continue
			}
			if m.hist {
				out[i].Hist[int(k&0xfff)] += v
			} else {
				out[i].Errnos[int(k&0xfff)] += v
			}
		}
		if err := it.Err(); err != nil {
			return nil, Counters{}, fmt.Errorf("BPF map %s: %w", m.name, err)
		}
	}
	var c Counters
	cm := t.coll.Maps["counters"]
	for i, dst := range map[int]*uint64{dropEvents: &c.EventsDropped, dropHist: &c.HistDropped, dropErrno: &c.ErrnoDropped, dropStarts: &c.StartsDropped, restarted: &c.Restarted} {
		var vals []uint64
		if err := cm.Lookup(uint32(i), &vals); err != nil {
			return nil, Counters{}, fmt.Errorf("BPF map counters[%d]: %w", i, err)
		}
		for _, v := range vals {
			*dst += v
		}
	}
	return out, c, nil
}

// InProgress returns the calls entered and not yet exited, by tid (nr and
// CLOCK_MONOTONIC enter time).
func (t *Tracer) InProgress() map[int][2]uint64 {
	out := map[int][2]uint64{}
	var k uint32
	var v struct {
		Ts  uint64
		Nr  uint32
		Pad uint32
	}
	it := t.coll.Maps["starts"].Iterate()
	for it.Next(&k, &v) {
		if v.Ts != 0 { // 0: the thread's last call has exited
			out[int(k)] = [2]uint64{uint64(v.Nr), v.Ts}
		}
	}
	return out
}

// ErrPidNamespace: pyobs runs in a child pid namespace.
var ErrPidNamespace = errors.New("the kernel's thread ids are not this namespace's")

// initPidNS checks that pyobs sees the init pid namespace's ids: the
// programs compare the kernel's own tgid with the target's pid, which in a
// child namespace would silently match nothing.
func initPidNS() error {
	l, err := procfs.Default().SelfPidNamespace()
	if err != nil || l == procfs.InitPidNamespace {
		return nil
	}
	return fmt.Errorf("pyobs runs in a child pid namespace (%s): %w", l, ErrPidNamespace)
}

// Gate explains why BPF may not be permitted here: the capabilities this
// process has and kernel.unprivileged_bpf_disabled.
func Gate() string {
	var caps uint64
	fs := procfs.Default()
	if st, err := fs.SelfStatus(); err == nil {
		caps = st.CapEff
	}
	has := func(bit uint) string {
		if caps&(1<<bit) != 0 {
			return "yes"
		}
		return "no"
	}
	unpriv := fs.UnprivilegedBPF("unknown")
	return fmt.Sprintf("needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): CAP_BPF %s, CAP_PERFMON %s, CAP_SYS_ADMIN %s; kernel.unprivileged_bpf_disabled=%s",
		has(39), has(38), has(21), unpriv)
}
