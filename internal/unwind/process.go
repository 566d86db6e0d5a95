package unwind

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
)

// mapping is one executable line of /proc/PID/maps and the object it
// maps, once a pc landed in it.
type mapping struct {
	procfs.Mapping

	obj      *Object
	bias     uint64
	err      error // why obj is nil
	attached bool  // obj/err are set: objects load when a pc first lands in them
}

// Cache holds parsed objects by file identity (device, inode, path), so
// a file is parsed once for every process and sample that maps it.
type Cache struct {
	mu   sync.Mutex
	objs map[string]objEntry
}

type objEntry struct {
	obj *Object
	err error
}

// NewCache returns an empty object cache.
func NewCache() *Cache { return &Cache{objs: map[string]objEntry{}} }

func (c *Cache) get(key string, load func() (*Object, error)) (*Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.objs[key]; ok {
		return e.obj, e.err
	}
	o, err := load()
	c.objs[key] = objEntry{o, err}
	return o, err
}

// Process unwinds the samples of one process.
type Process struct {
	Pid      int
	FS       procfs.FS // the proc filesystem, procfs.Default() unless a test roots it elsewhere
	cache    *Cache
	maps     []mapping
	mapsAt   time.Time
	MapsRead int // how often /proc/PID/maps was read
}

// NewProcess prepares unwinding in pid, sharing objects through cache.
func NewProcess(pid int, cache *Cache) *Process {
	return &Process{Pid: pid, FS: procfs.Default(), cache: cache}
}

func (p *Process) refresh() error {
	p.mapsAt = time.Now()
	p.MapsRead++
	all, err := p.FS.Maps(p.Pid)
	if err != nil {
		return err
	}
	var maps []mapping // a fresh slice: callers may hold a *mapping of the old one
	for _, m := range all {
		if m.Exec() {
			maps = append(maps, mapping{Mapping: m})
		}
	}
	p.maps = maps
	return nil
}

// attach finds (or loads) the object of a mapping and its load bias.
func (p *Process) attach(m *mapping) {
	m.attached = true
	var key string
	var load func() (*Object, error)
	switch {
	case m.Path == "[vdso]":
		key = fmt.Sprintf("[vdso] %d", m.End-m.Start)
		load = func() (*Object, error) {
			b, err := p.readMem(m.Start, m.End-m.Start)
			if err != nil {
				return nil, err
			}
			return LoadObject(bytes.NewReader(b))
		}
	case m.Inode == 0 || m.Path == "":
		m.err = errors.New("anonymous executable memory (JIT?): no CFI")
		return
	default:
		key = m.Dev + " " + strconv.FormatUint(m.Inode, 10) + " " + m.Path
		load = func() (*Object, error) { return p.openObject(m) }
	}
	m.obj, m.err = p.cache.get(key, load)
	if m.obj != nil {
		var ok bool
		if m.bias, ok = m.obj.Bias(m.Start, m.Offset); !ok {
			m.obj, m.err = nil, fmt.Errorf("no loadable segment at file offset 0x%x", m.Offset)
		}
	}
}

// openObject opens the mapped file itself (through map_files: right even
// when the path was replaced or deleted, or lies in another mount
// namespace), falling back to the path.
func (p *Process) openObject(m *mapping) (*Object, error) {
	f, err := os.Open(p.FS.MapFilePath(p.Pid, m.Start, m.End))
	if err != nil {
		if f, err = os.Open(strings.TrimSuffix(m.Path, " (deleted)")); err != nil {
			return nil, fmt.Errorf("can't open %s: %w", m.Path, err)
		}
	}
	defer f.Close()
	o, err := LoadObject(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	return o, nil
}

func (p *Process) readMem(addr, n uint64) ([]byte, error) {
	f, err := p.FS.OpenMem(p.Pid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("pid %d, address 0x%x: can't read %d bytes: %w", p.Pid, addr, n, err)
	}
	return b, nil
}

// mapping finds the executable mapping of addr, re-reading the maps (at
// most every 100 ms) when none holds it: a library loaded since.
func (p *Process) mapping(addr uint64) *mapping {
	for attempt := 0; attempt < 2; attempt++ {
		i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > addr })
		if i < len(p.maps) && p.maps[i].Start <= addr {
			m := &p.maps[i]
			if !m.attached {
				// Lazily: a process maps many libraries a stack never enters.
				p.attach(m)
			}
			return m
		}
		if attempt == 0 && (p.maps == nil || time.Since(p.mapsAt) > 100*time.Millisecond) {
			if p.refresh() != nil {
				return nil
			}
		}
	}
	return nil
}

// Status is how an unwind ended.
type Status uint8

const (
	Full      Status = iota // reached the outermost frame
	Truncated               // the stack copy (or the depth limit) ended first
	Failed                  // a frame without mapping, CFI or a usable rule
)

// MaxDepth bounds one unwind.
const MaxDepth = 1024

// Unwind walks the native stack from regs (rip in the RegRA column) over
// the copied stack and appends each frame's pc, leaf first, to out. The
// error says why a Truncated or Failed unwind stopped.
func (p *Process) Unwind(regs Regs, stack StackCopy, out []uint64) ([]uint64, Status, error) {
	out, _, st, err := p.UnwindSP(regs, stack, out, nil)
	return out, st, err
}

// UnwindSP is Unwind that also appends to sps each frame's
// stack pointer (its locals lie between it and the next frame's): what
// ties a native interpreter frame to the C-stack link its Python frames
// point to.
func (p *Process) UnwindSP(regs Regs, stack StackCopy, out, sps []uint64) ([]uint64, []uint64, Status, error) {
	out, sps, st, err := p.unwind(regs, stack, out, sps, true)
	return out, sps, st, err
}

func (p *Process) unwind(regs Regs, stack StackCopy, out, sps []uint64, wantSP bool) ([]uint64, []uint64, Status, error) {
	if regs.Have&(1<<RegRA) == 0 || regs.Have&(1<<RegRSP) == 0 {
		return out, sps, Failed, ErrNoRegister
	}
	for depth := 0; ; depth++ {
		pc := regs.V[RegRA]
		out = append(out, pc)
		if wantSP {
			sps = append(sps, regs.V[RegRSP])
		}
		if depth == MaxDepth {
			return out, sps, Truncated, fmt.Errorf("%w (%d frames)", ErrDepth, MaxDepth)
		}
		look := pc
		if depth > 0 {
			look-- // a return address may lie just past its call (noreturn callees)
		}
		m := p.mapping(look)
		if m == nil {
			return out, sps, Failed, fmt.Errorf("pc 0x%x: %w", pc, ErrNoMapping)
		}
		if m.obj == nil {
			return out, sps, Failed, fmt.Errorf("pc 0x%x in %s: %w: %w", pc, m.Path, ErrNoCFI, m.err)
		}
		row, err := m.obj.Row(look - m.bias)
		if err != nil {
			return out, sps, Failed, fmt.Errorf("pc 0x%x in %s+0x%x: %w", pc, m.Path, look-m.bias, err)
		}
		next, err := Step(row, &regs, stack)
		switch {
		case errors.Is(err, ErrOutermost):
			return out, sps, Full, nil
		case errors.Is(err, ErrOutsideCopy):
			return out, sps, Truncated, err
		case err != nil:
			return out, sps, Failed, fmt.Errorf("pc 0x%x in %s+0x%x: %w", pc, m.Path, look-m.bias, err)
		}
		if next.V[RegRA] == 0 {
			return out, sps, Full, nil
		}
		if next.V[RegRSP] <= regs.V[RegRSP] {
			return out, sps, Failed, fmt.Errorf("pc 0x%x: %w", pc, ErrNoProgress)
		}
		regs = next
	}
}

// More reasons an unwind stops.
var (
	ErrNoMapping  = errors.New("pc in no executable mapping")
	ErrNoCFI      = errors.New("no CFI for the mapping")
	ErrNoProgress = errors.New("the stack pointer did not move up")
	ErrDepth      = errors.New("depth limit")
)

// Reason is a short, stable name for why an unwind stopped (for counts).
func Reason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrOutsideCopy, "stack_copy_end"}, {ErrDepth, "depth_limit"}, {ErrNoMapping, "no_mapping"},
		{ErrNoCFI, "no_cfi"}, {ErrNoFDE, "no_fde"}, {ErrNoProgress, "no_progress"},
		{ErrNoRegister, "register_unknown"}, {ErrBadExpr, "unsupported_expression"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	var fe *FormatError
	if errors.As(err, &fe) {
		return "bad_cfi"
	}
	return "other"
}

// Symbol is a native frame's name.
type Symbol struct {
	Name  string // the function, or "" when unknown
	Path  string // the mapped file ("" when in no mapping)
	Off   uint64 // address in the file's own terms
	Known bool
}

// Label renders the folded-format label: the symbol, or
// "[unknown] (LIB+0xOFF)".
func (s Symbol) Label() string {
	if s.Known {
		return s.Name
	}
	if s.Path == "" {
		return fmt.Sprintf("[unknown] (0x%x)", s.Off)
	}
	return fmt.Sprintf("[unknown] (%s+0x%x)", filepath.Base(s.Path), s.Off)
}

// Refresh re-reads the process's mappings now (they are otherwise read
// when an address misses them): a caller that will symbolize after the
// process may have exited keeps its last mappings this way.
func (p *Process) Refresh() error { return p.refresh() }

// Symbolize names the function at pc (pass pc-1 for return addresses).
func (p *Process) Symbolize(pc uint64) Symbol {
	m := p.mapping(pc)
	if m == nil {
		return Symbol{Off: pc}
	}
	if m.obj == nil {
		if m.Path == "" {
			return Symbol{Off: pc}
		}
		return Symbol{Path: m.Path, Off: pc - m.Start + m.Offset}
	}
	s := Symbol{Path: m.Path, Off: pc - m.bias}
	s.Name, s.Known = m.obj.Symbol(s.Off)
	return s
}

// HasSymbol reports whether the file mapped at path (as /proc/PID/maps
// names it) names a function name; ok is false when no executable mapping
// of it could be read.
func (p *Process) HasSymbol(path, name string) (found, ok bool) {
	if p.maps == nil {
		if err := p.refresh(); err != nil {
			return false, false
		}
	}
	for i := range p.maps {
		m := &p.maps[i]
		if m.Path != path {
			continue
		}
		if !m.attached {
			p.attach(m)
		}
		if m.obj != nil {
			return m.obj.HasSymbol(name), true
		}
	}
	return false, false
}

// FuncStart is the start of the function containing pc (pass pc-1 for
// return addresses) as its CFI knows it: the initial location of the FDE
// covering pc, in the process's addresses. It identifies a function that
// has no symbol (static functions of a binary stripped to .dynsym).
func (p *Process) FuncStart(pc uint64) (uint64, bool) {
	m := p.mapping(pc)
	if m == nil || m.obj == nil {
		return 0, false
	}
	start, ok := m.obj.FuncStart(pc - m.bias)
	if !ok {
		return 0, false
	}
	return start + m.bias, true
}
