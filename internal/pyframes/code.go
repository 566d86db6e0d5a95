package pyframes

import (
	"fmt"
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
	cache      map[int]int // addrq -> line
}

func (p *Process) code(addr uint64) (*codeInfo, error) {
	l, r := p.Layout, &p.objs
	if addr == 0 {
		return nil, fmt.Errorf("NULL code object: %w", ErrTorn)
	}
	hdr := make([]byte, l.CodeSize) // fresh: a cached codeInfo keeps it
	if err := r.mem.Read(addr, hdr); err != nil {
		return nil, fmt.Errorf("can't read code object 0x%x: %w", addr, err)
	}
	if le64(hdr, l.ObType) != r.types.code {
		return nil, fmt.Errorf("code object 0x%x: %w (%w)", addr, errWrongType, ErrTorn)
	}
	key := p.codeKeyOf(hdr)
	if !p.NoCache {
		if ci, ok := p.codes[addr]; ok && ci.key == key {
			p.Stats.CodeHits++
			return ci, nil
		}
	}
	return p.loadCode(addr, hdr, key)
}

// codeKey identifies a code object by the objects it points to; its
// refcount and warm-up counters change all the time and are left out.
type codeKey struct {
	typ, filename, name, qualname, linetable uint64
	firstLine                                uint32
}

func (p *Process) codeKeyOf(hdr []byte) codeKey {
	l := p.Layout
	k := codeKey{typ: le64(hdr, l.ObType), filename: le64(hdr, l.CodeFilename), name: le64(hdr, l.CodeName),
		linetable: le64(hdr, l.CodeLinetable), firstLine: le32(hdr, l.CodeFirstLineno)}
	if l.CodeQualname != 0 {
		k.qualname = le64(hdr, l.CodeQualname)
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
	for j := 0; j < n && err == nil; j++ {
		hdr := segs[j].Buf
		a := addrs[idx[j]]
		if le64(hdr, l.ObType) != p.objs.types.code {
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
