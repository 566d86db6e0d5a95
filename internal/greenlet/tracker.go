package greenlet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/session"
)

// Tracker tells, at a sample, which greenlet a Python thread runs: one
// 8-byte read of its greenlet::ThreadState's current_greenlet. Which
// ThreadState belongs to which thread comes from a full read (Read: a GC
// walk), done at the start and again, backing off from 1 s to 30 s, while
// samples come from threads it does not know.
type Tracker struct {
	s    *session.Session
	lay  *Layout
	byTS map[uint64]tsInfo // PyThreadState* → its greenlet state

	Version string
	Err     error // the last scan's failure (not imported, unknown layout, …)
	Scans   int

	last    *Snapshot
	next    time.Time
	backoff time.Duration
	buf     []byte
}

type tsInfo struct{ gts, main uint64 } // greenlet::ThreadState*, main greenlet

// NewTracker scans once. A layout that is unknown is final: the error is
// returned. A greenlet not imported yet is not: Err says so until it is.
func NewTracker(s *session.Session) (*Tracker, error) {
	t := &Tracker{s: s, byTS: map[uint64]tsInfo{}, backoff: time.Second}
	t.scan()
	var unknown *UnknownLayoutError
	if errors.As(t.Err, &unknown) {
		return nil, t.Err
	}
	return t, nil
}

// scan reads every greenlet and maps each thread's ThreadState.
func (t *Tracker) scan() { t.Rescan() }

// Rescan reads every greenlet now (a GC walk: Read) and maps each thread's
// ThreadState again; it returns what it read, or nil when the read failed
// (Err says why). offcpu --greenlets calls it periodically: which
// greenlets are parked, and where.
func (t *Tracker) Rescan() *Snapshot {
	t.Scans++
	t.next = time.Now().Add(t.backoff)
	t.backoff = min(2*t.backoff, 30*time.Second)
	maps, err := t.s.FS.Maps(t.s.Pid)
	if err != nil {
		t.Err = err
		return nil
	}
	t.last = nil
	snap, err := Read(t.s.Py, maps)
	if err != nil {
		t.Err = err
		return nil
	}
	t.Err, t.lay, t.Version = nil, snap.Layout, snap.Version
	refs, err := t.s.Py.ThreadRefs()
	if err != nil {
		t.Err = err
		return nil
	}
	tids, _ := t.s.FS.Tasks(t.s.Pid)
	ns := t.s.HostTids()
	keys := make([]threadKey, len(refs))
	for i, r := range refs {
		keys[i] = threadKey{tid: t.s.HostTid(r.NativeID, r.ThreadID, tids, ns), pthread: r.ThreadID}
	}
	groups := map[uint64][]*Greenlet{}
	for i := range snap.Greenlets {
		g := &snap.Greenlets[i]
		groups[g.MainGreenlet] = append(groups[g.MainGreenlet], g)
	}
	for main, ts := range snap.ThreadStates {
		if i := threadOf(groups[main], keys, maps, t.s.Pid); i >= 0 {
			t.byTS[refs[i].Addr] = tsInfo{gts: ts, main: main}
		}
	}
	t.last = snap
	return snap
}

// Last is what the last scan read (nil: it failed).
func (t *Tracker) Last() *Snapshot { return t.last }

// Running is the greenlet (its id) thread state ts runs now; 0: not known.
func (t *Tracker) Running(ts uint64) uint64 {
	info, ok := t.byTS[ts]
	if !ok {
		if time.Now().After(t.next) {
			t.scan()
			info, ok = t.byTS[ts]
		}
		if !ok {
			return 0
		}
	}
	cur, err := readU64(t.s.Py.Mem(), info.gts+t.lay.TSCurrent)
	if err != nil {
		return 0
	}
	return cur
}

// Link is one greenlet of a parent chain.
type Link struct {
	Addr   uint64
	Type   string // tp_name without its module: greenlet, Greenlet, Hub
	Main   bool
	Parent uint64
}

// Chain reads g and its parents, g first (at most 64; a cycle ends it).
func (t *Tracker) Chain(g uint64, out []Link) ([]Link, error) {
	out = out[:0]
	if t.lay == nil {
		return out, errors.New("no greenlet layout")
	}
	mem := t.s.Py.Mem()
	if cap(t.buf) < int(t.lay.Size) {
		t.buf = make([]byte, t.lay.Size)
	}
	b := t.buf[:t.lay.Size]
	var hdr [40]byte
	for depth := 0; g != 0 && depth < 64; depth++ {
		if err := mem.Read(g, hdr[:]); err != nil {
			return out, fmt.Errorf("can't read greenlet 0x%x: %w", g, err)
		}
		pimpl := binary.LittleEndian.Uint64(hdr[t.lay.Pimpl:])
		if pimpl == 0 {
			return out, fmt.Errorf("greenlet 0x%x has no state", g)
		}
		if err := mem.Read(pimpl, b); err != nil {
			return out, fmt.Errorf("can't read greenlet 0x%x's state at 0x%x: %w", g, pimpl, err)
		}
		if binary.LittleEndian.Uint64(b[t.lay.Self:]) != g {
			return out, fmt.Errorf("greenlet 0x%x's state at 0x%x does not point back", g, pimpl)
		}
		name := t.s.Py.TypeName(binary.LittleEndian.Uint64(hdr[8:]))
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			name = name[i+1:]
		}
		l := Link{Addr: g, Type: name, Main: binary.LittleEndian.Uint64(b[t.lay.StackStop:]) == ^uint64(0)}
		if !l.Main {
			l.Parent = binary.LittleEndian.Uint64(b[t.lay.Parent:])
		}
		out = append(out, l)
		g = l.Parent
	}
	return out, nil
}

// Main is thread state ts's main greenlet (0: not known). While another
// greenlet runs, the thread's frame chain starts at that greenlet's run
// function: it does not reach the thread's outermost frame.
func (t *Tracker) Main(ts uint64) uint64 { return t.byTS[ts].main }
