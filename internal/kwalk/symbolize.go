//go:build amd64

package kwalk

import (
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// Symbolizer turns code-object addresses into names, files and lines
// through internal/pyframes' code-object reader, with a cache by address.
//
// Validation: on 3.14+ each sample carries the interpreter's code-object
// generation (bumped whenever a code object is freed): an entry holds the
// generations between the first and the last read that found the same
// object (its header compared with the cached one); a sample of another
// generation re-reads it first. A read that fails (the object freed since)
// keeps the entry for the samples of the generations it holds: a stack
// read as it came still names its frames after its module's import ended. Without a generation (≤3.13) an entry is re-checked when it
// is older than Revalidate; a code object freed and its address reused
// within that time would be misnamed.
type Symbolizer struct {
	P          CodeReader
	Revalidate time.Duration // ≤3.13 (default 1 s)
	gen        bool
	cache      map[uint64]*symEntry
	Stats      SymStats
	now        func() time.Time
	tick       time.Time // Tick's clock, zero: read the clock per frame
}

// CodeReader reads a code object's names (pyframes.Process.Code).
type CodeReader interface {
	Code(addr uint64) (*pyframes.CodeSymbol, error)
}

// SymStats counts the symbolizer's work.
type SymStats struct {
	Hits, Misses, Rechecks, Errors uint64
}

type symEntry struct {
	sym     *pyframes.CodeSymbol
	lo, hi  uint64 // 3.14+: the generations it was found at, and all between
	checked time.Time
}

const maxSymEntries = 1 << 16

// NewSymbolizer symbolizes code objects of p; l says whether samples carry
// a code-object generation.
func NewSymbolizer(p *pyframes.Process, l *pyframes.KernelLayout) *Symbolizer {
	return &Symbolizer{P: p, Revalidate: time.Second, gen: l.CodeGenerationAddr != 0,
		cache: map[uint64]*symEntry{}, now: time.Now}
}

func (s *Symbolizer) code(addr, gen uint64) (*pyframes.CodeSymbol, error) {
	e, ok := s.cache[addr]
	if ok {
		fresh := false
		if s.gen {
			fresh = e.lo <= gen && gen <= e.hi
		} else {
			fresh = s.clock().Sub(e.checked) < s.Revalidate
		}
		if fresh {
			s.Stats.Hits++
			return e.sym, nil
		}
		s.Stats.Rechecks++
	} else {
		s.Stats.Misses++
	}
	sym, err := s.P.Code(addr)
	if err != nil {
		s.Stats.Errors++
		if !s.gen {
			delete(s.cache, addr)
		}
		return nil, err
	}
	if ok && s.gen && sym.ID == e.sym.ID {
		// The same object at both generations: it was at all between.
		e.lo, e.hi = min(e.lo, gen), max(e.hi, gen)
		return e.sym, nil
	}
	if len(s.cache) >= maxSymEntries {
		s.cache = map[uint64]*symEntry{}
	}
	s.cache[addr] = &symEntry{sym: sym, lo: gen, hi: gen, checked: s.clock()}
	return sym, nil
}

// Generations: the samples carry the code-object generation (3.14+), so a
// name read once holds for every sample of the same generation.
func (s *Symbolizer) Generations() bool { return s.gen }

// Tick sets the clock the ≤3.13 re-validation reads, for a caller that
// symbolizes in batches (a ring drained every look): one clock read per
// batch instead of one per frame (a tenth of record's CPU on a target of
// many stacks). A zero t goes back to reading the clock per frame.
func (s *Symbolizer) Tick(t time.Time) { s.tick = t }

func (s *Symbolizer) clock() time.Time {
	if !s.tick.IsZero() {
		return s.tick
	}
	return s.now()
}

// Frames symbolizes a sample's frames, innermost first.
func (s *Symbolizer) Frames(smp *Sample) ([]pyframes.Frame, error) {
	out := make([]pyframes.Frame, 0, len(smp.Frames))
	for _, f := range smp.Frames {
		sym, err := s.code(f.Code, smp.CodeGen)
		if err != nil {
			return out, fmt.Errorf("tid %d: code object 0x%x: %w", smp.Tid, f.Code, err)
		}
		out = append(out, pyframes.Frame{Function: sym.Function, File: sym.File, Line: sym.Line(int(f.Lasti)),
			Code: f.Code, CodeID: sym.ID, Entry: f.Flags&FrameEntry != 0})
	}
	return out, nil
}

// Code is the code object at addr for a sample taken at code-object
// generation gen (Sample.CodeGen), validated as Frames does.
func (s *Symbolizer) Code(addr, gen uint64) (*pyframes.CodeSymbol, error) {
	return s.code(addr, gen)
}
