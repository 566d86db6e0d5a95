package pyframes

import (
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/output"
)

// ThreadName is one threading.Thread of the target: its name and the ids
// it recorded for itself.
type ThreadName struct {
	Ident uint64 // threading.get_ident(): the pthread_t
	// NativeID is the Thread's own _native_id: the kernel TID (in the
	// target's pid namespace) of the thread that runs it; 0 when unknown.
	NativeID int
	Name     string
}

// ThreadNames reads every interpreter's threading names, walking no stack:
// for samplers that label threads by kernel TID. Each name comes with the
// TID its Thread object recorded (_native_id), not through its ident:
// glibc hands a finished thread's pthread_t, and so its ident, to the next
// thread it starts, so an ident names whichever thread holds it now.
//
// The _active dict is looked up in sys.modules once per activeFor (the
// lookup is most of a read's cost, and samplers read names every few tens
// of milliseconds while threads come and go).
func (p *Process) ThreadNames() ([]ThreadName, error) {
	var out []ThreadName
	var first error
	now := time.Now()
	if p.actives == nil {
		p.actives = map[uint64]activeDict{}
	}
	err := p.interps(func(_ int64, interp uint64) error {
		a, ok := p.actives[interp]
		if ok && now.Sub(a.at) < activeFor {
			if ns, err := p.threadEntries(a.dict, true); err == nil {
				out = append(out, ns...)
				return nil
			}
		}
		delete(p.actives, interp)
		active, err := p.activeDict(interp)
		var ns []ThreadName
		if err == nil {
			ns, err = p.threadEntries(active, true)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			return nil
		}
		p.actives[interp] = activeDict{dict: active, at: now}
		out = append(out, ns...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

// activeDict is a cached threading._active and when it was looked up.
type activeDict struct {
	dict uint64
	at   time.Time
}

// activeFor is how long ThreadNames trusts an _active dict it looked up
// (threading rebinds it only in a fork's child, at its start).
const activeFor = time.Second

// threadNames maps thread ident → threading name for one interpreter.
func (p *Process) threadNames(interp uint64) (map[uint64]string, error) {
	active, err := p.activeDict(interp)
	if err != nil {
		return nil, err
	}
	ns, err := p.threadEntries(active, false)
	if err != nil {
		return nil, err
	}
	names := make(map[uint64]string, len(ns))
	for _, n := range ns {
		names[n.Ident] = n.Name
	}
	return names, nil
}

// activeDict finds one interpreter's sys.modules["threading"]._active.
func (p *Process) activeDict(interp uint64) (uint64, error) {
	l, r := p.Layout, p.objs
	r.memo = newObjMemo()
	if l.InterpModules == 0 {
		return 0, fmt.Errorf("no sys.modules offset for %s", l.Version)
	}
	modules, err := r.u64(interp + l.InterpModules)
	if err != nil || modules == 0 {
		return 0, fmt.Errorf("can't read sys.modules: %v", err)
	}
	mod, err := r.dictGetStr(modules, "threading")
	if err != nil {
		return 0, err
	}
	md, err := r.u64(mod + l.ModuleDict)
	if err != nil {
		return 0, err
	}
	return r.dictGetStr(md, "_active")
}

// threadEntries reads an _active dict ({ident: Thread}), each Thread's
// _name and, with native, its _native_id. Threads not started through
// threading (or in a process that never imported it) have no entry.
func (p *Process) threadEntries(active uint64, native bool) ([]ThreadName, error) {
	// Every Thread shares its class's header and keys: read them once.
	l, r := p.Layout, p.objs
	r.memo = newObjMemo()
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
	var natives []int
	if native {
		// The ints' type: PyLong_Type, else (no symbol) the idents' own.
		intType := r.types.long
		if intType == 0 && got > 0 {
			intType = le64(segs[0].Buf, l.ObType)
		}
		natives = p.nativeIDs(&r, threads, intType)
	}
	ents := make([]ThreadName, 0, len(items))
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
		ent := ThreadName{Ident: ident}
		if natives != nil {
			ent.NativeID = natives[i]
		}
		ents, nameObjs = append(ents, ent), append(nameObjs, nameOf[i])
	}
	texts, errs := r.strs(nameObjs, maxNameChars)
	out := ents[:0]
	for i, ent := range ents {
		if errs[i] == nil {
			ent.Name = output.Printable(texts[i]) // the target chose it: nothing in it may act on a terminal
			out = append(out, ent)
		}
	}
	return out, nil
}

// nativeIDs is each Thread's _native_id (0 where it is not an int of
// intType that fits a TID: None before the thread ran, or unreadable), the
// ints read in one vectored read.
func (p *Process) nativeIDs(r *objReader, threads []uint64, intType uint64) []int {
	l := p.Layout
	out := make([]int, len(threads))
	vals, errs := r.getAttrs(threads, "_native_id")
	n := int(l.LongDigits + 12)
	buf := make([]byte, n*len(threads))
	segs := make([]Seg, 0, len(threads))
	at := make([]int, 0, len(threads))
	for i, v := range vals {
		if errs[i] == nil && v != 0 {
			segs = append(segs, Seg{Addr: v, Buf: buf[i*n : (i+1)*n]})
			at = append(at, i)
		}
	}
	got := readV(r.mem, segs)
	for k, s := range segs[:got] {
		if intType == 0 || le64(s.Buf, l.ObType) != intType {
			continue // None, or not an int
		}
		if id, err := r.ulongFrom(s.Buf); err == nil && id > 0 && id < 1<<31 {
			out[at[k]] = int(id)
		}
	}
	return out
}
