//go:build amd64

package kwalk

import (
	"errors"
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// Symbolizer turns code-object addresses into names, files and lines
// through internal/pyframes' code-object reader, with a cache by address.
//
// Validation: each sample carries the interpreter's code-object
// generation where the build has one, a counter that moves whenever a
// code object may have been replaced at an address.
//   - 3.14+ (bumped whenever a code object is freed): an entry holds the
//     generations between the first and the last read that found the same
//     object (its header compared with the cached one); a sample of another
//     generation re-reads it first. A read that fails (the object freed
//     since) keeps the entry for the samples of the generations it holds: a
//     stack read as it came still names its frames after its module's
//     import ended.
//   - 3.12/3.13 (the next co_version, bumped whenever one is created): the
//     object read has its own co_version. Found below the sample's
//     generation, it was created before the sample and is alive now, so it
//     was the sample's; at or above it, the sampled object was freed and
//     its address reused since: not named (ErrReplaced), never misnamed. An
//     entry holds every generation from its co_version up to the counter
//     read before the object was.
//   - Without one (≤3.11, a 3.12 build stripped of its symbol table, a
//     counter that ran out: generation 0) an entry names samples for
//     Revalidate after its last check; a code object freed and its
//     address reused within that time can be misnamed (Stats.Replaced
//     counts the reuses a re-check found). It is re-checked from half that
//     age, while the process is most likely still there to read: a
//     re-check that fails within Revalidate keeps the name, as no check
//     would have, so a program's last samples, named after it exited, keep
//     the names its earlier ones were given.
type Symbolizer struct {
	P          CodeReader
	Revalidate time.Duration // without a generation (default 1 s)
	gen        bool
	created    bool                   // 3.12/3.13: gen counts creations, entries check co_version
	counter    func() (uint64, error) // created: the counter now
	counted    uint64                 // created: the counter's last reading
	byAge      string                 // why there is no generation ("" when there is)
	cache      map[uint64]*symEntry
	Stats      SymStats
	now        func() time.Time
	tick       time.Time // Tick's clock, zero: read the clock per frame
}

// ErrReplaced: the code object a sample ran was freed and another one
// created at its address before pyobs read it (3.12/3.13).
var ErrReplaced = errors.New("code object replaced since the sample")

// CodeReader reads a code object's names (pyframes.Process.Code).
type CodeReader interface {
	Code(addr uint64) (*pyframes.CodeSymbol, error)
}

// SymStats counts the symbolizer's work.
type SymStats struct {
	Hits, Misses, Rechecks, Errors uint64
	// Replaced: reads that found another code object than the one cached
	// at its address, or (3.12/3.13) than the one sampled there.
	Replaced uint64
}

type symEntry struct {
	sym     *pyframes.CodeSymbol
	lo, hi  uint64 // the generations it holds for
	checked time.Time
}

const maxSymEntries = 1 << 16

// NewSymbolizer symbolizes code objects of p; l says whether samples carry
// a code-object generation, and which kind.
func NewSymbolizer(p *pyframes.Process, l *pyframes.KernelLayout) *Symbolizer {
	s := &Symbolizer{P: p, Revalidate: time.Second, gen: l.CodeGenerationAddr != 0,
		cache: map[uint64]*symEntry{}, now: time.Now}
	if l.CodeGenerationCreated && l.CodeGenerationAddr != 0 {
		addr := l.CodeGenerationAddr
		s.created = true
		s.counter = func() (uint64, error) { return p.CodeCounter(addr) }
	}
	if !s.gen {
		s.byAge = l.CodeGenerationWhy
		if s.byAge == "" {
			s.byAge = fmt.Sprintf("python %s keeps no count of code objects created or freed", l.Version)
		}
	}
	return s
}

func (s *Symbolizer) code(addr, gen uint64) (*pyframes.CodeSymbol, error) {
	if s.created && gen != 0 {
		return s.codeCreated(addr, gen)
	}
	e, ok := s.cache[addr]
	byGen := s.gen && !s.created
	if ok {
		fresh := false
		if byGen {
			fresh = e.lo <= gen && gen <= e.hi
		} else {
			fresh = s.clock().Sub(e.checked) < s.Revalidate/2
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
		if ok && !byGen && s.clock().Sub(e.checked) < s.Revalidate {
			// An early re-check that failed (the process exited, or the
			// object was freed): still within the entry's time.
			return e.sym, nil
		}
		s.Stats.Errors++
		if !byGen {
			delete(s.cache, addr)
		}
		return nil, err
	}
	if ok && sym.ID == e.sym.ID {
		if byGen {
			// The same object at both generations: it was at all between.
			e.lo, e.hi = min(e.lo, gen), max(e.hi, gen)
		} else {
			e.checked = s.clock()
		}
		return e.sym, nil
	}
	if ok {
		s.Stats.Replaced++
	}
	s.put(addr, &symEntry{sym: sym, lo: gen, hi: gen, checked: s.clock()})
	return sym, nil
}

// codeCreated is code for a sample of generation gen on 3.12/3.13.
func (s *Symbolizer) codeCreated(addr, gen uint64) (*pyframes.CodeSymbol, error) {
	e, ok := s.cache[addr]
	if ok && e.lo <= gen && gen <= e.hi {
		s.Stats.Hits++
		return e.sym, nil
	}
	if ok {
		s.Stats.Rechecks++
	} else {
		s.Stats.Misses++
	}
	// The counter first: the object read next holds for every generation
	// up to it (one created after this read would have moved it). Any
	// earlier reading bounds it too, so the counter is read again only for
	// a sample newer than the last reading: once per batch of a churning
	// program's samples, not once per frame.
	if s.counted < gen {
		if c, err := s.counter(); err == nil {
			s.counted = c
		}
	}
	hi := max(s.counted, gen)
	sym, err := s.P.Code(addr)
	if err != nil {
		s.Stats.Errors++
		return nil, err
	}
	if uint64(sym.Version) >= gen {
		s.Stats.Replaced++
		return nil, fmt.Errorf("code object 0x%x: co_version %d, created at or after the sample's generation %d: %w", addr, sym.Version, gen, ErrReplaced)
	}
	if ok && sym.ID == e.sym.ID {
		e.lo, e.hi = min(e.lo, uint64(sym.Version)+1), max(e.hi, hi)
		return e.sym, nil
	}
	s.put(addr, &symEntry{sym: sym, lo: uint64(sym.Version) + 1, hi: hi, checked: s.clock()})
	return sym, nil
}

func (s *Symbolizer) put(addr uint64, e *symEntry) {
	if len(s.cache) >= maxSymEntries {
		s.cache = map[uint64]*symEntry{}
	}
	s.cache[addr] = e
}

// Generations: the samples carry the code-object generation (3.12+), so a
// name read once holds for every sample of the same generation.
func (s *Symbolizer) Generations() bool { return s.gen }

// ByAge says why names are re-checked by age only (no generation), ""
// when they are not.
func (s *Symbolizer) ByAge() string { return s.byAge }

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
