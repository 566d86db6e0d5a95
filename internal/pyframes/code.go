package pyframes

import (
	"errors"
	"fmt"

	"github.com/pyobs/pyobs/internal/output"
)

// codeInfo is what a frame needs from its code object, read once per code
// object and kept while the object's header is unchanged.
type codeInfo struct {
	serial     uint64  // unique per load: lets callers cache by code object cheaply
	key        codeKey // fields that change only if the address was reused for another object
	hdr        []byte
	name       string
	file       string
	firstLine  int
	table      []byte
	localNames []string
	localKinds []byte
	// localsPartial: localNames stopped short (a names tuple unreadable):
	// read again at the next use, not kept.
	localsPartial bool
	cache         map[int]int // addrq -> line
}

func (p *Process) code(addr uint64) (*codeInfo, error) {
	ci, loaded, err := p.codeOnce(addr)
	if err != nil || !loaded {
		return ci, err
	}
	// Loaded: the object again, alive and the same, so its strings were too
	// while they were read. (Freed in between, they may be other strings
	// by now: a name of one code object with the file of another.)
	again := make([]byte, len(ci.hdr))
	if err := p.objs.mem.Read(addr, again); err != nil {
		delete(p.codes, addr)
		return nil, fmt.Errorf("can't read code object 0x%x again: %w", addr, err)
	}
	if !p.sameCode(again, ci.key) {
		delete(p.codes, addr)
		return nil, fmt.Errorf("code object 0x%x: %w while its names were read (%w)", addr, errFreed, ErrTorn)
	}
	return ci, nil
}

// sameCode: hdr is a live code object with key.
func (p *Process) sameCode(hdr []byte, key codeKey) bool {
	return le64(hdr, p.Layout.ObType) == p.objs.types.code && p.Layout.liveRefcount(hdr) && p.codeKeyOf(hdr) == key
}

// codeOnce is code without the re-read of a code object just loaded
// (loaded: the caller must make it).
func (p *Process) codeOnce(addr uint64) (*codeInfo, bool, error) {
	l, r := p.Layout, &p.objs
	if addr == 0 {
		return nil, false, fmt.Errorf("NULL code object: %w", ErrTorn)
	}
	hdr := make([]byte, l.CodeSize) // fresh: a cached codeInfo keeps it
	if err := r.mem.Read(addr, hdr); err != nil {
		return nil, false, fmt.Errorf("can't read code object 0x%x: %w", addr, err)
	}
	if le64(hdr, l.ObType) != r.types.code {
		return nil, false, fmt.Errorf("code object 0x%x: %w (%w)", addr, errWrongType, ErrTorn)
	}
	if !l.liveRefcount(hdr) {
		return nil, false, fmt.Errorf("code object 0x%x: %w (%w)", addr, errFreed, ErrTorn)
	}
	key := p.codeKeyOf(hdr)
	if !p.NoCache {
		if ci, ok := p.codes[addr]; ok && ci.key == key {
			p.Stats.CodeHits++
			return ci, false, nil
		}
	}
	ci, err := p.loadCode(addr, hdr, key)
	return ci, err == nil, err
}

// codeKey identifies a code object by the objects it points to; its
// refcount and warm-up counters change all the time and are left out.
type codeKey struct {
	typ, filename, name, qualname, linetable uint64
	firstLine                                uint32
	version                                  uint32 // 3.12/3.13 co_version: tells reused addresses apart where the pointers may not
}

func (p *Process) codeKeyOf(hdr []byte) codeKey {
	l := p.Layout
	k := codeKey{typ: le64(hdr, l.ObType), filename: le64(hdr, l.CodeFilename), name: le64(hdr, l.CodeName),
		linetable: le64(hdr, l.CodeLinetable), firstLine: le32(hdr, l.CodeFirstLineno)}
	if l.CodeQualname != 0 {
		k.qualname = le64(hdr, l.CodeQualname)
	}
	if l.CodeVersion != 0 {
		k.version = le32(hdr, l.CodeVersion)
	}
	return k
}

func (p *Process) loadCode(addr uint64, hdr []byte, key codeKey) (*codeInfo, error) {
	l, r := p.Layout, &p.objs
	p.Stats.CodeMisses++
	p.codeSerial++
	ci := &codeInfo{serial: p.codeSerial, key: key, hdr: hdr, firstLine: int(int32(le32(hdr, l.CodeFirstLineno)))}
	var err error
	nameAt := l.CodeQualname
	if nameAt == 0 {
		nameAt = l.CodeName
	}
	if ci.name, err = r.str(le64(hdr, nameAt), maxNameChars); err != nil {
		return nil, fmt.Errorf("code object 0x%x: name: %w", addr, err)
	}
	if ci.file, err = r.str(le64(hdr, l.CodeFilename), maxFileChars); err != nil {
		return nil, fmt.Errorf("code object 0x%x: filename: %w", addr, err)
	}
	// The target chose them: nothing in them may act on a terminal.
	ci.name, ci.file = output.Printable(ci.name), output.Printable(ci.file)
	if ci.table, _, err = r.bytesObj(le64(hdr, l.CodeLinetable), maxTableBytes); err != nil {
		return nil, fmt.Errorf("code object 0x%x: line table: %w", addr, err)
	}
	if !p.NoCache {
		if len(p.codes) > 1<<16 { // bounded: a process that churns code objects can't grow us forever
			p.codes = map[uint64]*codeInfo{}
		}
		p.codes[addr] = ci
	}
	return ci, nil
}

func (ci *codeInfo) line(addrq int) int {
	if l, ok := ci.cache[addrq]; ok {
		return l
	}
	l, err := LineFromLocations(ci.table, ci.firstLine, addrq)
	if err != nil {
		l = ci.firstLine
	}
	if ci.cache == nil {
		ci.cache = map[int]int{}
	}
	if len(ci.cache) < 4096 {
		ci.cache[addrq] = l
	}
	return l
}

func (ci *codeInfo) line310(byteOff int) int {
	l, err := LineFrom310Table(ci.table, ci.firstLine, byteOff)
	if err != nil {
		return ci.firstLine
	}
	return l
}

// codesOf resolves the code objects of a stack: the header of each
// distinct one is read in one vectored read; a cached one whose
// identifying fields are unchanged is a hit, the others are loaded from
// the header just read.
func (p *Process) codesOf(addrs []uint64, out []*codeInfo) error {
	l := p.Layout
	segs := p.scratch.segs[:0]
	idx := p.scratch.idx[:0]
	hsize := int(l.CodeSize)
	need := len(addrs) * hsize
	if cap(p.scratch.codeBuf) < need {
		p.scratch.codeBuf = make([]byte, need)
	}
	buf := p.scratch.codeBuf[:need]
	for i, a := range addrs {
		out[i] = nil
		if a == 0 {
			return fmt.Errorf("NULL code object: %w", ErrTorn)
		}
		dup := false
		for _, j := range idx { // stacks are short and recursion repeats: a scan beats a map
			if addrs[j] == a {
				dup = true
				break
			}
		}
		if !dup {
			segs = append(segs, Seg{Addr: a, Buf: buf[len(segs)*hsize : (len(segs)+1)*hsize]})
			idx = append(idx, i)
		}
	}
	n := readV(p.objs.mem, segs)
	var err error
	var loaded []int // addrs' indexes of the code objects loaded here
	for j := 0; j < n && err == nil; j++ {
		hdr := segs[j].Buf
		a := addrs[idx[j]]
		if le64(hdr, l.ObType) != p.objs.types.code || !l.liveRefcount(hdr) {
			continue // read alone below: the error names it
		}
		key := p.codeKeyOf(hdr)
		ci := p.codes[a]
		hit := ci != nil && ci.key == key && !p.NoCache
		if !hit {
			// loadCode keeps the header: a copy, the buffer is reused.
			ci, err = p.loadCode(a, append([]byte(nil), hdr...), key)
			if err != nil {
				ci = nil
			} else {
				loaded = append(loaded, idx[j])
			}
		}
		for i := idx[j]; i < len(addrs) && ci != nil; i++ {
			if addrs[i] == a {
				out[i] = ci
				if hit {
					p.Stats.CodeHits++
				}
			}
		}
	}
	p.scratch.segs, p.scratch.idx = segs[:0], idx[:0]
	if err := p.recheckLoaded(addrs, loaded, out); err != nil {
		return err
	}
	for i, a := range addrs {
		if out[i] != nil {
			continue
		}
		ci, err := p.code(a)
		if err != nil {
			return err
		}
		for k := i; k < len(addrs); k++ {
			if addrs[k] == a {
				out[k] = ci
			}
		}
	}
	return nil
}

// errFreed: a code object's memory no longer holds a live object.
var errFreed = errors.New("freed")

// liveRefcount: the object header in hdr has a reference count a live
// object can have. The allocators write their free-list link where the
// count was (pymalloc and glibc's tcache a pointer, or NULL at a list's
// end), so a block freed since a sample fails this though its type field
// still says code object. Free-threaded builds start with the owning
// thread's id there: not checked.
func (l *Layout) liveRefcount(hdr []byte) bool {
	// The count sits right before ob_type (after _ob_next/_ob_prev in a
	// Py_TRACE_REFS build).
	if l.FreeThreaded || l.ObType < 8 || uint64(len(hdr)) < l.ObType {
		return true
	}
	rc := le64(hdr, l.ObType-8)
	if rc == 0 {
		return false
	}
	if l.Version.Minor >= 14 {
		// A 32-bit count, 16 overflow bits (0 short of 2^32 references)
		// and 16 flag bits (immortal, static): a user-space pointer has
		// bits 32-47 set and no flags.
		return !(rc>>48 == 0 && rc>>32 != 0)
	}
	// ≤3.13: no live count reaches 2^40 (immortal objects, 3.12+, hold
	// 2^32-1, a little more after increments by extensions built for older
	// versions); a user-space pointer does.
	return rc < 1<<40
}

// recheckLoaded reads the code objects just loaded (addrs[i] for i in loaded)
// again, in one vectored read: each must still be the live object whose
// names were read (code's re-read, for a whole stack at once).
func (p *Process) recheckLoaded(addrs []uint64, loaded []int, out []*codeInfo) error {
	if len(loaded) == 0 {
		return nil
	}
	hsize := int(p.Layout.CodeSize)
	buf := make([]byte, len(loaded)*hsize)
	segs := make([]Seg, len(loaded))
	for k, i := range loaded {
		segs[k] = Seg{Addr: addrs[i], Buf: buf[k*hsize : (k+1)*hsize]}
	}
	n := readV(p.objs.mem, segs)
	for k, i := range loaded {
		if k < n && out[i] != nil && p.sameCode(segs[k].Buf, out[i].key) {
			continue
		}
		delete(p.codes, addrs[i])
		return fmt.Errorf("code object 0x%x: %w while its names were read (%w)", addrs[i], errFreed, ErrTorn)
	}
	return nil
}
