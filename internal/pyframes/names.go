package pyframes

import "fmt"

// threadNames maps thread ident → threading name for one interpreter, from
// sys.modules["threading"]._active (a dict {ident: Thread}), reading each
// Thread's _name attribute. Threads not started through threading (or in a
// process that never imported it) have no name here.
func (p *Process) threadNames(interp uint64) (map[uint64]string, error) {
	// Every Thread shares its class's header and keys: read them once.
	l, r := p.Layout, p.objs
	r.memo = newObjMemo()
	if l.InterpModules == 0 {
		return nil, fmt.Errorf("no sys.modules offset for %s", l.Version)
	}
	modules, err := r.u64(interp + l.InterpModules)
	if err != nil || modules == 0 {
		return nil, fmt.Errorf("can't read sys.modules: %v", err)
	}
	mod, err := r.dictGetStr(modules, "threading")
	if err != nil {
		return nil, err
	}
	md, err := r.u64(mod + l.ModuleDict)
	if err != nil {
		return nil, err
	}
	active, err := r.dictGetStr(md, "_active")
	if err != nil {
		return nil, err
	}
	items, err := r.dictItems(active)
	if err != nil {
		return nil, err
	}
	// Every ident in one vectored read, every name in another.
	n := int(l.LongDigits + 12)
	buf := make([]byte, n*len(items))
	segs := make([]Seg, len(items))
	for i, e := range items {
		segs[i] = Seg{Addr: e.key, Buf: buf[i*n : (i+1)*n]}
	}
	got := readV(r.mem, segs)
	threads := make([]uint64, len(items))
	for i, e := range items {
		threads[i] = e.value
	}
	nameOf, nameErrs := r.getAttrs(threads, "_name")
	idents := make([]uint64, 0, len(items))
	nameObjs := make([]uint64, 0, len(items))
	for i, e := range items {
		var ident uint64
		var err error
		if i < got {
			ident, err = r.ulongFrom(segs[i].Buf)
		} else {
			ident, err = r.ulong(e.key)
		}
		if err != nil || nameErrs[i] != nil {
			continue
		}
		idents, nameObjs = append(idents, ident), append(nameObjs, nameOf[i])
	}
	texts, errs := r.strs(nameObjs, maxNameChars)
	names := make(map[uint64]string, len(idents))
	for i, ident := range idents {
		if errs[i] == nil {
			names[ident] = texts[i]
		}
	}
	return names, nil
}
