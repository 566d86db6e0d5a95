package pyframes

import "fmt"

// getAttrs is getAttr over many objects of one kind (threading's Thread
// objects), in two vectored reads where the attribute sits in an object's
// shared-keys values (3.11+ without a materialised __dict__): first every
// object's type and pre-header pointers, then every value slot. One by one
// that was three reads per object, ~150 syscalls for a 50-thread dump.
// Any object off that path goes through getAttr, so the results are the
// same; errs[i] is set where vals[i] is not.
func (o *objReader) getAttrs(objs []uint64, name string) (vals []uint64, errs []error) {
	vals, errs = make([]uint64, len(objs)), make([]error, len(objs))
	slow := func(i int) { vals[i], errs[i] = o.getAttr(objs[i], name) }
	const back, win = 32, 32 + 16 // [obj-32, obj+16): values/dict pointers, ob_refcnt, ob_type
	minor := o.l.Version.Minor
	if o.l.Version.Major != 3 || minor < 11 || o.l.ObType+8 > win-back || o.l.ManagedDictBack > back {
		for i := range objs {
			slow(i)
		}
		return vals, errs
	}
	buf := make([]byte, win*len(objs))
	segs := make([]Seg, 0, len(objs))
	for i, obj := range objs {
		if obj < back {
			errs[i] = fmt.Errorf("object at 0x%x: bad address", obj)
			continue
		}
		segs = append(segs, Seg{Addr: obj - back, Buf: buf[i*win : (i+1)*win]})
	}
	got := readV(o.mem, segs)
	read := make(map[uint64]bool, got)
	for _, g := range segs[:got] {
		read[g.Addr+back] = true
	}
	// Where each object's attribute lies: values base + 8 * index.
	type slot struct {
		i            int
		values, addr uint64
	}
	var slots []slot
	index := map[uint64]int{} // shared keys table -> the name's index (-1: absent)
	for i, obj := range objs {
		if errs[i] != nil {
			continue
		}
		if !read[obj] {
			slow(i)
			continue
		}
		w := buf[i*win : (i+1)*win]
		thdr, err := o.typeHeader(le64(w, back+o.l.ObType))
		if err != nil || le64(thdr, o.l.TypeFlags)&tpflagsManagedDict == 0 {
			slow(i)
			continue
		}
		var values uint64
		switch {
		case minor == 11:
			if le64(w, back-24) == 0 { // no dict: the values at obj-32
				values = le64(w, 0)
			}
		case minor == 12:
			if dv := le64(w, back-24); dv&1 != 0 { // (char*)values - 1
				values = dv + 1
			}
		default:
			if le64(w, back-o.l.ManagedDictBack) == 0 && le64(thdr, o.l.TypeFlags)&tpflagsInlineValues != 0 {
				values = obj + le64(thdr, o.l.TypeBasicSize)
			}
		}
		if values == 0 {
			slow(i) // a real __dict__ (or none): the one-by-one path says which
			continue
		}
		keys, err := o.cachedKeys(le64(w, back+o.l.ObType))
		if err != nil {
			slow(i)
			continue
		}
		at, ok := index[keys]
		if !ok {
			if at, err = o.sharedIndex(keys, name); err != nil {
				at = -1
			}
			index[keys] = at
		}
		if at < 0 {
			slow(i)
			continue
		}
		slots = append(slots, slot{i: i, values: values, addr: o.valuesBase(values) + 8*uint64(at)})
	}
	// 3.13+ marks inline values invalid (its dict took them over) in byte
	// 3 of their header: read it beside the slot.
	check := o.l.Version.atLeast(13)
	per := 8
	if check {
		per = 16
	}
	vbuf := make([]byte, per*len(slots))
	vsegs := make([]Seg, 0, 2*len(slots))
	for k, s := range slots {
		vsegs = append(vsegs, Seg{Addr: s.addr, Buf: vbuf[k*per : k*per+8]})
		if check {
			vsegs = append(vsegs, Seg{Addr: s.values, Buf: vbuf[k*per+8 : k*per+12]})
		}
	}
	vgot := readV(o.mem, vsegs)
	step := 1
	if check {
		step = 2
	}
	for k, s := range slots {
		if (k+1)*step > vgot || check && vbuf[k*per+8+3] == 0 {
			slow(s.i)
			continue
		}
		vals[s.i] = le64(vbuf, uint64(k*per))
	}
	return vals, errs
}

// sharedIndex is name's index in a shared keys table.
func (o *objReader) sharedIndex(keys uint64, name string) (int, error) {
	ents, err := o.sharedEntries(keys)
	if err != nil {
		return 0, err
	}
	addrs := make([]uint64, 0, len(ents))
	for _, e := range ents {
		if e.key != 0 {
			addrs = append(addrs, e.key)
		}
	}
	texts := o.keyTexts(addrs)
	for i, e := range ents {
		if e.key != 0 && texts[e.key] == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("attribute %q not in shared keys", name)
}
