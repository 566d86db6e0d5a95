package unwind

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// Object is what the unwinder keeps of one ELF file: its CFI, its
// loadable segments (to compute the load bias of a mapping) and its
// function symbols. Built once per file and shared by every process and
// sample that maps it.
type Object struct {
	Type  elf.Type
	eh    *EHFrame
	ehErr error
	loads []elf.ProgHeader
	syms  []symbol // sorted by addr

	mu   sync.Mutex
	rows map[uint64]cachedRow
}

type symbol struct {
	addr, size uint64
	name       string
}

type cachedRow struct {
	row *Row
	err error
}

// maxCachedRows bounds an object's row cache (about 700 bytes a row).
const maxCachedRows = 16384

// LoadObject parses an ELF file. An ELF without usable CFI still loads (its
// symbols name frames; the unwind stops there).
func LoadObject(r io.ReaderAt) (*Object, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("ELF for %v/%v, want x86-64", f.Machine, f.Class)
	}
	o := &Object{Type: f.Type, rows: map[uint64]cachedRow{}}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, p.ProgHeader)
		}
	}
	o.eh, o.ehErr = loadEHFrame(f)
	o.syms = loadSymbols(f)
	return o, nil
}

func loadEHFrame(f *elf.File) (*EHFrame, error) {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, errors.New("no .eh_frame section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("can't read .eh_frame: %w", err)
	}
	var hdr []byte
	var hdrAddr uint64
	if h := f.Section(".eh_frame_hdr"); h != nil && h.Type != elf.SHT_NOBITS {
		if hdr, err = h.Data(); err != nil {
			hdr = nil
		}
		hdrAddr = h.Addr
	}
	return NewEHFrame(data, sec.Addr, hdr, hdrAddr)
}

// loadSymbols collects function symbols of .symtab and .dynsym, sorted,
// one per address, C++ and Rust names demangled.
func loadSymbols(f *elf.File) []symbol {
	var out []symbol
	add := func(syms []elf.Symbol, err error) {
		if err != nil {
			return
		}
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
				continue
			}
			out = append(out, symbol{s.Value, s.Size, s.Name})
		}
	}
	add(f.Symbols())
	add(f.DynamicSymbols())
	// (slices' generic stable sort: sort.SliceStable's reflection costs
	// tens of ms on libpython's 11k symbols, paid by every dump --native.)
	slices.SortStableFunc(out, func(a, b symbol) int {
		if a.addr != b.addr {
			return cmp.Compare(a.addr, b.addr)
		}
		return cmp.Compare(b.size, a.size)
	})
	// One symbol per address (.symtab's comes first and wins).
	w := 0
	for i, s := range out {
		if i > 0 && s.addr == out[w-1].addr {
			continue
		}
		if strings.HasPrefix(s.name, "_Z") || strings.HasPrefix(s.name, "_R") {
			s.name = demangle.Filter(s.name, demangle.NoParams)
		}
		out[w] = s
		w++
	}
	return out[:w]
}

// Symbol names the function containing vaddr (an address in the file's
// own terms), or returns false.
// HasSymbol reports whether the object names a function name (.symtab
// or .dynsym).
func (o *Object) HasSymbol(name string) bool {
	for _, s := range o.syms {
		if s.name == name {
			return true
		}
	}
	return false
}

func (o *Object) Symbol(vaddr uint64) (string, bool) {
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].addr > vaddr }) - 1
	if i < 0 {
		return "", false
	}
	s := o.syms[i]
	if s.size != 0 && vaddr-s.addr >= s.size {
		return "", false
	}
	return s.name, true
}

// Bias is the load bias of a mapping of this file that starts at start
// with file offset off: file vaddr = memory address - bias. (0 for a
// non-PIE executable mapped where it was linked.)
func (o *Object) Bias(start, off uint64) (uint64, bool) {
	for _, p := range o.loads {
		if p.Off&^0xfff <= off && off < p.Off+p.Filesz {
			return start - (p.Vaddr - (p.Off - off)), true
		}
	}
	return 0, false
}

// Row returns the CFA row at vaddr (cached per address).
func (o *Object) Row(vaddr uint64) (*Row, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.rows[vaddr]; ok {
		return c.row, c.err
	}
	var c cachedRow
	if o.eh == nil {
		c.err = fmt.Errorf("no CFI: %w", o.ehErr)
	} else if f, err := o.eh.Find(vaddr); err != nil {
		c.err = err
	} else if row, err := RowAt(f, vaddr); err != nil {
		c.err = err
	} else {
		c.row = &row
	}
	if len(o.rows) >= maxCachedRows {
		clear(o.rows)
	}
	o.rows[vaddr] = c
	return c.row, c.err
}

// FuncStart is the initial location of the FDE covering vaddr (file
// terms), or false when the file has no CFI for it.
func (o *Object) FuncStart(vaddr uint64) (uint64, bool) {
	if o.eh == nil {
		return 0, false
	}
	f, err := o.eh.Find(vaddr)
	if err != nil {
		return 0, false
	}
	return f.Start, true
}
