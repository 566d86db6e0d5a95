package greenlet

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"path/filepath"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// ErrNotImported: the target has not loaded greenlet's extension module.
var ErrNotImported = errors.New("greenlet not imported")

// Module is the mapped _greenlet extension of a target.
type Module struct {
	Path         string // as mapped
	GreenletType uint64 // &PyGreenlet_Type in the target
}

// FindModule finds the mapped greenlet/_greenlet*.so and its PyGreenlet_Type.
func FindModule(pid int, maps []pyframes.Mapping) (*Module, error) {
	var path string
	lowest := ^uint64(0)
	for _, m := range maps {
		base := filepath.Base(m.Path)
		if strings.HasPrefix(base, "_greenlet.") && strings.HasSuffix(base, ".so") && filepath.Base(filepath.Dir(m.Path)) == "greenlet" {
			if path == "" {
				path = m.Path
			}
			if m.Path == path && m.Start < lowest {
				lowest = m.Start
			}
		}
	}
	if path == "" {
		return nil, ErrNotImported
	}
	f, err := elf.Open(procfs.Default().RootPath(pid, path))
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't open %s: %w", pid, path, err)
	}
	defer f.Close()
	var firstLoad uint64 = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr < firstLoad {
			firstLoad = p.Vaddr
		}
	}
	bias := lowest - firstLoad&^0xfff
	var typ uint64
	for _, get := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Name == "PyGreenlet_Type" && s.Value != 0 {
				typ = s.Value + bias
			}
		}
		if typ != 0 {
			break
		}
	}
	if typ == 0 {
		return nil, fmt.Errorf("pid %d: %s defines no PyGreenlet_Type symbol", pid, path)
	}
	return &Module{Path: path, GreenletType: typ}, nil
}

// Greenlet is one greenlet object as read.
type Greenlet struct {
	Addr         uint64 // the object's address: id(g) in the target
	Type         string // tp_name: greenlet.greenlet, gevent's Greenlet, …
	Main         bool   // a thread's main greenlet
	State        string // StateRunning, StateSuspended, StateNotStarted, StateDead, StateUnreadable
	Parent       uint64 // 0: none (a main greenlet)
	MainGreenlet uint64 // its thread's main greenlet (itself for a main one)
	RunType      string // not started: the type of its run callable
	CStack       uint64 // an address on its thread's C stack, 0: none known
	Frames       []pyframes.Frame
	Err          string
}

// States.
const (
	StateRunning    = "running"
	StateSuspended  = "suspended"
	StateNotStarted = "not started"
	StateDead       = "dead"
	StateUnreadable = "unreadable"
)

// Snapshot is every greenlet the GC lists held at the read.
type Snapshot struct {
	Version   string
	Layout    *Layout
	Module    *Module
	Greenlets []Greenlet
	// ThreadStates: each main greenlet's greenlet::ThreadState (whose
	// current_greenlet is the one its thread runs).
	ThreadStates map[uint64]uint64
	Objects      int // GC-tracked objects visited
	Reads        int // reads of the target's memory by the GC walks (whole pages, mostly)
	Retries      int // GC list walks redone because a list changed under the read
	Incomplete   int // GC lists that changed under every walk: greenlets in them may be missing
	Vanished     int // greenlets freed between the walk and the read of their state: left out
}

const (
	maxObjects  = 50_000_000
	maxRetries  = 3
	maxBaseWalk = 32
)

// errTornList: a GC list changed while it was walked.
var errTornList = errors.New("a GC list changed while it was read")

// Read finds every greenlet object of the main interpreter (through its GC
// lists) and reads its state and, when suspended, its Python frames.
func Read(py *pyframes.Process, maps []pyframes.Mapping) (*Snapshot, error) {
	mod, err := FindModule(py.Pid, maps)
	if err != nil {
		return nil, err
	}
	ver, err := py.ModuleStr("greenlet", "__version__")
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't read greenlet.__version__: %w", py.Pid, err)
	}
	if py.FreeThreaded() {
		return nil, fmt.Errorf("pid %d: greenlet %s on a free-threaded build: not supported (no GC lists to find greenlets in)", py.Pid, ver)
	}
	lay, err := LayoutFor(ver, py.Version().Minor)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Version: ver, Layout: lay, Module: mod, ThreadStates: map[uint64]uint64{}}
	walk, err := gcGreenlets(py, mod.GreenletType)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't walk the GC lists: %w", py.Pid, err)
	}
	objs := walk.objs
	snap.Objects, snap.Reads, snap.Retries, snap.Incomplete = walk.objects, walk.reads, walk.retries, walk.incomplete
	mem := py.Mem()
	buf := make([]byte, lay.Size)
	current := map[uint64]uint64{} // main greenlet → its thread's current greenlet
	bad := 0
	for _, o := range objs {
		g := Greenlet{Addr: o.addr, Type: py.TypeName(o.typ)}
		if o.pimpl == 0 {
			snap.Vanished++ // being deallocated
			continue
		}
		if err := mem.Read(o.pimpl, buf); err != nil {
			g.State, g.Err = StateUnreadable, fmt.Sprintf("can't read its state at 0x%x: %v", o.pimpl, err)
			snap.Greenlets = append(snap.Greenlets, g)
			continue
		}
		u := func(off uint64) uint64 { return binary.LittleEndian.Uint64(buf[off:]) }
		if u(lay.Self) != o.addr {
			// Freed since the walk (its memory reused), or a layout that
			// does not fit: told apart below, by whether any fits.
			bad++
			continue
		}
		start, stop, top := u(lay.StackStart), u(lay.StackStop), u(lay.TopFrame)
		g.Main = stop == ^uint64(0)
		if g.Main {
			g.MainGreenlet = o.addr
			if ts := u(lay.ThreadState); ts != 0 {
				snap.ThreadStates[o.addr] = ts
				if cur, err := readU64(mem, ts+lay.TSCurrent); err == nil {
					current[o.addr] = cur
				}
			}
			if top != 0 {
				g.CStack = start
			}
		} else {
			g.MainGreenlet, g.Parent = u(lay.MainGreenlet), u(lay.Parent)
			if stop != 0 && start != 0 {
				g.CStack = stop
			}
			if stop == 0 {
				g.State = StateNotStarted
				if run := u(lay.RunCallable); run != 0 {
					if tp, err := readU64(mem, run+8); err == nil {
						g.RunType = py.TypeName(tp)
					}
				}
			}
		}
		if g.State == "" && start == 0 {
			g.State = StateDead
		}
		if g.State == "" && top != 0 {
			g.State = StateSuspended
			g.Frames, err = framesOf(py, lay, top)
			if err != nil {
				g.Err = err.Error()
			}
		}
		snap.Greenlets = append(snap.Greenlets, g)
	}
	snap.Vanished += bad
	if bad > 0 && bad == len(objs) {
		return nil, fmt.Errorf("pid %d: greenlet %s on CPython 3.%d: no greenlet's state points back to it: the layout (%s) does not fit this build", py.Pid, ver, lay.Minor, lay.Source)
	}
	// A greenlet not started yet has no main greenlet of its own: its
	// parent's is the thread it will run in.
	byAddr := map[uint64]*Greenlet{}
	for i := range snap.Greenlets {
		byAddr[snap.Greenlets[i].Addr] = &snap.Greenlets[i]
	}
	for i := range snap.Greenlets {
		g := &snap.Greenlets[i]
		for p, depth := g.Parent, 0; g.MainGreenlet == 0 && p != 0 && depth < 64; depth++ {
			pg, ok := byAddr[p]
			if !ok {
				break
			}
			g.MainGreenlet, p = pg.MainGreenlet, pg.Parent
		}
	}
	for i := range snap.Greenlets {
		g := &snap.Greenlets[i]
		if g.State != "" || g.Err != "" {
			continue
		}
		// Active with no saved frame: the one its thread runs now, or one
		// that switched away from C with no Python frame of its own.
		if cur, ok := current[g.MainGreenlet]; ok && cur == g.Addr {
			g.State = StateRunning
		} else {
			g.State = StateSuspended
		}
	}
	return snap, nil
}

// framesOf walks a suspended greenlet's saved frames from its top frame
// object: 3.10 the PyFrameObject chain itself; 3.11+ the interpreter frame
// it wraps (PyFrameObject.f_frame, right after f_back: 3.11–3.15), whose
// chain greenlet left linked past the C-stack frames (3.12+: it "exposes"
// them before switching away).
func framesOf(py *pyframes.Process, lay *Layout, top uint64) ([]pyframes.Frame, error) {
	if lay.Minor >= 11 {
		f, err := readU64(py.Mem(), top+24)
		if err != nil {
			return nil, fmt.Errorf("can't read frame object 0x%x: %w", top, err)
		}
		top = f
	}
	fr, err := py.FramesFrom(top)
	if err != nil {
		return fr, fmt.Errorf("frames from 0x%x: %w", top, err)
	}
	return fr, nil
}

func readU64(m pyframes.Memory, addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.Read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

type object struct{ addr, typ, pimpl uint64 }

// gcWalk is what one walk of every GC list found.
type gcWalk struct {
	objs       []object
	objects    int // GC objects visited
	reads      int // memory reads
	retries    int // list walks redone
	incomplete int // lists that changed under every walk: partly read
}

// gcGreenlets walks every GC list and keeps the greenlet objects (of
// greenlet's type or a subtype): for each object its GC header and the
// PyGreenlet fields after it, served from whole pages (pageCache: ~13
// objects per page read in a small gevent program). Each node's prev must
// point back at the node before it, else the list changed under the walk:
// that list is walked again (up to maxRetries times), and then kept as far
// as it was read, counted incomplete.
func gcGreenlets(py *pyframes.Process, greenletType uint64) (*gcWalk, error) {
	heads, err := py.GCLists()
	if err != nil {
		return nil, err
	}
	isG := map[uint64]bool{greenletType: true}
	subtype := func(tp uint64) bool {
		if v, ok := isG[tp]; ok {
			return v
		}
		t := tp
		for i := 0; i < maxBaseWalk && t != 0; i++ {
			if v, ok := isG[t]; ok {
				isG[tp] = v
				return v
			}
			b, err := py.TypeBase(t)
			if err != nil {
				return false // not cached: a torn type read is retried next time
			}
			t = b
		}
		isG[tp] = false
		return false
	}
	w := &gcWalk{}
	for _, head := range heads {
		var best []object
		bestN := 0
		for attempt := 0; ; attempt++ {
			pc := newPageCache(py.Mem()) // pages as they are now
			objs, n, err := walkList(pc, head, subtype)
			w.reads += pc.reads
			if err == nil {
				w.objs, w.objects = append(w.objs, objs...), w.objects+n
				break
			}
			if len(objs) >= len(best) {
				best, bestN = objs, n
			}
			if attempt >= maxRetries {
				w.objs, w.objects = append(w.objs, best...), w.objects+bestN
				w.incomplete++
				break
			}
			w.retries++
		}
	}
	return w, nil
}

// walkList walks one GC list from its head; on a tear it returns what it
// read before it with errTornList.
func walkList(pc *pageCache, head uint64, subtype func(uint64) bool) ([]object, int, error) {
	const pimpl = 32 // PyGreenlet.pimpl: the same in every greenlet 3.x layout
	var out []object
	hb, err := pc.read(head, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("can't read GC list head 0x%x: %v: %w", head, err, errTornList)
	}
	prev, node := head, binary.LittleEndian.Uint64(hb)&^7
	n := 0
	for node != head {
		if n++; n > maxObjects {
			return out, n, fmt.Errorf("more than %d GC objects (or a cycle): %w", maxObjects, errTornList)
		}
		b, err := pc.read(node, pyframes.GCHeadSize+pimpl+8)
		if err != nil {
			return out, n, fmt.Errorf("GC object 0x%x: %v: %w", node, err, errTornList)
		}
		if binary.LittleEndian.Uint64(b[8:])&^7 != prev {
			return out, n, fmt.Errorf("GC object 0x%x: prev is not 0x%x: %w", node, prev, errTornList)
		}
		if tp := binary.LittleEndian.Uint64(b[pyframes.GCHeadSize+8:]); subtype(tp) {
			out = append(out, object{addr: node + pyframes.GCHeadSize, typ: tp, pimpl: binary.LittleEndian.Uint64(b[pyframes.GCHeadSize+pimpl:])})
		}
		prev, node = node, binary.LittleEndian.Uint64(b)&^7
	}
	return out, n, nil
}

// pageCache serves the GC walk's small reads from whole pages: objects that
// follow each other in a GC list were mostly allocated together, so one
// page read serves many of them. A page is read once per walk; a node that
// changed after its page was read is caught by the prev check like any
// other change under the walk.
type pageCache struct {
	mem   pyframes.Memory
	pages map[uint64][]byte
	bad   map[uint64]bool // pages that could not be read whole
	reads int
}

const (
	pageSize  = 4096
	pageLimit = 4096 // pages kept per walk (16 MiB); then the cache starts over
)

func newPageCache(m pyframes.Memory) *pageCache {
	return &pageCache{mem: m, pages: map[uint64][]byte{}, bad: map[uint64]bool{}}
}

// read returns n bytes at addr (valid until the next read).
func (c *pageCache) read(addr uint64, n int) ([]byte, error) {
	base := addr &^ (pageSize - 1)
	if addr+uint64(n) > base+pageSize || c.bad[base] {
		b := make([]byte, n) // straddles two pages, or its page is not whole: read on its own
		c.reads++
		return b, c.mem.Read(addr, b)
	}
	p, ok := c.pages[base]
	if !ok {
		if len(c.pages)+len(c.bad) >= pageLimit {
			clear(c.pages)
			clear(c.bad)
		}
		p = make([]byte, pageSize)
		c.reads++
		if err := c.mem.Read(base, p); err != nil {
			// A page partly unmapped or unreadable: the bytes themselves.
			c.bad[base] = true
			b := make([]byte, n)
			c.reads++
			return b, c.mem.Read(addr, b)
		}
		c.pages[base] = p
	}
	return p[addr-base : addr-base+uint64(n)], nil
}
