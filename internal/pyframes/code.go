package pyframes

import (
	"fmt"
)

// codeInfo is what a frame needs from its code object, read once per code
// object and kept while the object's header is unchanged.
type codeInfo struct {
	hdr        []byte // the header as read: a re-read that differs means the address was reused
	name       string
	file       string
	firstLine  int
	table      []byte
	nlocals    int
	localNames []string
	localKinds []byte
	cache      map[int]int // addrq -> line
}

func (p *Process) code(addr uint64) (*codeInfo, error) {
	l, r := p.Layout, &p.objs
	if addr == 0 {
		return nil, fmt.Errorf("NULL code object")
	}
	hdr := make([]byte, l.CodeSize)
	if err := r.mem.Read(addr, hdr); err != nil {
		return nil, fmt.Errorf("can't read code object 0x%x: %w", addr, err)
	}
	if le64(hdr, l.ObType) != r.types.code {
		return nil, fmt.Errorf("code object 0x%x: %w", addr, errWrongType)
	}
	if !p.NoCache {
		if ci, ok := p.codes[addr]; ok && string(ci.hdr) == string(hdr) {
			p.Stats.CodeHits++
			return ci, nil
		}
	}
	p.Stats.CodeMisses++
	ci := &codeInfo{hdr: hdr, firstLine: int(int32(le32(hdr, l.CodeFirstLineno)))}
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
