package pyframes

import "fmt"

// threadNames maps thread ident → threading name for one interpreter, from
// sys.modules["threading"]._active (a dict {ident: Thread}), reading each
// Thread's _name attribute. Threads not started through threading (or in a
// process that never imported it) have no name here.
func (p *Process) threadNames(interp uint64) (map[uint64]string, error) {
	l, r := p.Layout, &p.objs
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
	names := make(map[uint64]string, len(items))
	for _, e := range items {
		ident, err := r.ulong(e.key)
		if err != nil {
			continue
		}
		nameObj, err := r.getAttr(e.value, "_name")
		if err != nil {
			continue
		}
		if s, err := r.str(nameObj, maxNameChars); err == nil {
			names[ident] = s
		}
	}
	return names, nil
}
