package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// world312 builds a fake 3.12 interpreter in one arena of memory, with the
// walker's own static 3.12 layout: _PyRuntime, one interpreter, threads with
// cframes and frames, code objects with real 3.12 line tables, str / bytes /
// int / tuple / dict objects, and sys.modules["threading"]._active for
// thread names. Everything is addressed absolutely inside the arena, so the
// arena's bytes are a complete snapshot: the fuzz seed of FuzzWalkSnapshot.
//
//	base+0x000  _PyRuntime (0x400 bytes: room for a debug-offsets table)
//	base+0x400  Py_Version
//	base+0x500  type objects, None, True, False (fixed order, fixed addresses)
//	...         everything else, bump-allocated
type world312 struct {
	l    *Layout
	base uint64
	buf  []byte
	syms map[string]uint64
}

const worldBase = 0x7f0000100000

func newWorld312(t testing.TB) *world312 {
	l, ok := staticLayout(Version{3, 12, 1})
	if !ok {
		t.Fatal("no 3.12 layout")
	}
	w := &world312{l: l, base: worldBase, buf: make([]byte, 0x500), syms: map[string]uint64{}}
	w.syms["_PyRuntime"] = w.base
	w.syms["Py_Version"] = w.base + 0x400
	w.put32(w.base+0x400, 0x030c01f0)
	for _, name := range []string{"PyCode_Type", "PyUnicode_Type", "PyBytes_Type", "PyLong_Type", "PyBool_Type",
		"PyFloat_Type", "PyTuple_Type", "PyList_Type", "PyDict_Type", "PyModule_Type", "PyCell_Type", "PySet_Type",
		"NoneType", "Thread", "ManagedThread"} {
		w.syms[name] = w.typeObj(name)
	}
	w.syms["_Py_NoneStruct"] = w.obj(w.syms["NoneType"], 16)
	w.syms["_Py_TrueStruct"] = w.obj(w.syms["PyBool_Type"], 32)
	w.syms["_Py_FalseStruct"] = w.obj(w.syms["PyBool_Type"], 32)
	return w
}

func (w *world312) alloc(n int) uint64 {
	for len(w.buf)%16 != 0 {
		w.buf = append(w.buf, 0)
	}
	a := w.base + uint64(len(w.buf))
	w.buf = append(w.buf, make([]byte, n)...)
	return a
}

func (w *world312) at(a uint64, n int) []byte { return w.buf[a-w.base : a-w.base+uint64(n)] }
func (w *world312) put64(a, v uint64)         { binary.LittleEndian.PutUint64(w.at(a, 8), v) }
func (w *world312) put32(a uint64, v uint32)  { binary.LittleEndian.PutUint32(w.at(a, 4), v) }

func (w *world312) obj(tp uint64, size int) uint64 {
	a := w.alloc(size)
	w.put64(a, 1) // ob_refcnt
	w.put64(a+w.l.ObType, tp)
	return a
}

func (w *world312) cstr(s string) uint64 {
	a := w.alloc(len(s) + 1)
	copy(w.at(a, len(s)), s)
	return a
}

func (w *world312) typeObj(name string) uint64 {
	a := w.alloc(int(w.l.HeapCachedKeys) + 8)
	w.put64(a+w.l.TypeName, w.cstr(name))
	switch name {
	case "Thread":
		w.put64(a+w.l.TypeDictOffset, 16) // instance __dict__ at +16 (no managed dict)
	case "ManagedThread":
		w.put64(a+w.l.TypeFlags, tpflagsManagedDict) // values before the object, keys in ht_cached_keys
	}
	return a
}

// keys builds a unicode-kind PyDictKeysObject (16-byte {key, value} entries).
func (w *world312) keys(names ...uint64) uint64 {
	k := w.alloc(32 + 8 + 16*len(names))
	h := w.at(k, 32)
	h[8], h[9], h[10] = 3, 3, 1
	w.put64(k+24, uint64(len(names)))
	for i, n := range names {
		w.put64(k+40+16*uint64(i), n)
	}
	return k
}

// managedObj builds a 3.12 instance whose attributes live in a values array
// shared-keys style: obj-24 holds (values - 1), the type's ht_cached_keys
// holds the names.
func (w *world312) managedObj(tp uint64, names []string, values []uint64) uint64 {
	var ks []uint64
	for _, n := range names {
		ks = append(ks, w.str(n))
	}
	w.put64(tp+w.l.HeapCachedKeys, w.keys(ks...))
	vals := w.alloc(8 * len(values))
	for i, v := range values {
		w.put64(vals+8*uint64(i), v)
	}
	pre := w.alloc(32 + 16)
	obj := pre + 32
	w.put64(obj, 1)
	w.put64(obj+w.l.ObType, tp)
	w.put64(obj-24, vals-1)
	return obj
}

func (w *world312) str(s string) uint64 {
	rs := []rune(s)
	kind, ascii := 1, true
	for _, r := range rs {
		switch {
		case r > 0xffff:
			kind = 4
		case r > 0xff && kind < 2:
			kind = 2
		}
		if r >= 0x80 {
			ascii = false
		}
	}
	hdr := w.l.CompactSize
	state := byte(kind<<2 | 1<<5)
	if ascii {
		hdr, state = w.l.ASCIISize, state|1<<6
	}
	a := w.obj(w.syms["PyUnicode_Type"], int(hdr)+(len(rs)+1)*kind)
	w.put64(a+w.l.UnicodeLength, uint64(len(rs)))
	w.at(a+w.l.UnicodeState, 1)[0] = state
	copy(w.at(a+hdr, len(rs)*kind), ucs(kind, rs...))
	return a
}

func (w *world312) bytesObj(b []byte) uint64 {
	a := w.obj(w.syms["PyBytes_Type"], int(w.l.BytesData)+len(b)+1)
	w.put64(a+w.l.BytesSize, uint64(len(b)))
	copy(w.at(a+w.l.BytesData, len(b)), b)
	return a
}

func (w *world312) long(v uint64) uint64 {
	var digits []uint32
	for x := v; x != 0; x >>= 30 {
		digits = append(digits, uint32(x&(1<<30-1)))
	}
	a := w.obj(w.syms["PyLong_Type"], int(w.l.LongDigits)+4*max(1, len(digits)))
	tag := uint64(len(digits)) << 3
	if v == 0 {
		tag = 1
	}
	w.put64(a+w.l.LongTag, tag)
	for i, d := range digits {
		w.put32(a+w.l.LongDigits+4*uint64(i), d)
	}
	return a
}

func (w *world312) tuple(items ...uint64) uint64 {
	a := w.obj(w.syms["PyTuple_Type"], int(w.l.TupleItems)+8*len(items))
	w.put64(a+w.l.TupleSize, uint64(len(items)))
	for i, it := range items {
		w.put64(a+w.l.TupleItems+8*uint64(i), it)
	}
	return a
}

// dict builds a combined-table dict with a general (kind 0) keys object:
// {refcnt, log2_size, log2_index_bytes, kind, version, usable, nentries,
// indices[8], entries{hash, key, value}...}.
func (w *world312) dict(kv ...uint64) uint64 {
	n := len(kv) / 2
	keys := w.alloc(32 + 8 + 24*n)
	k := w.at(keys, 32)
	k[8], k[9], k[10] = 3, 3, 0
	w.put64(keys+24, uint64(n))
	for i := 0; i < n; i++ {
		e := keys + 40 + 24*uint64(i)
		w.put64(e, 0x1234)
		w.put64(e+8, kv[2*i])
		w.put64(e+16, kv[2*i+1])
	}
	d := w.obj(w.syms["PyDict_Type"], int(w.l.DictValues)+8)
	w.put64(d+w.l.DictUsed, uint64(n))
	w.put64(d+w.l.DictKeys, keys)
	return d
}

func (w *world312) code(name, file string, first int, table []byte, locals ...string) uint64 {
	a := w.obj(w.syms["PyCode_Type"], int(w.l.CodeAdaptive)+64)
	w.put32(a+w.l.CodeFirstLineno, uint32(first))
	w.put64(a+w.l.CodeName, w.str(name))
	w.put64(a+w.l.CodeQualname, w.str(name))
	w.put64(a+w.l.CodeFilename, w.str(file))
	w.put64(a+w.l.CodeLinetable, w.bytesObj(table))
	var names []uint64
	kinds := make([]byte, len(locals))
	for i, n := range locals {
		names = append(names, w.str(n))
		kinds[i] = 0x20 // CO_FAST_LOCAL
	}
	w.put64(a+w.l.CodeLocalsplusNames, w.tuple(names...))
	w.put64(a+w.l.CodeLocalsplusKinds, w.bytesObj(kinds))
	return a
}

// frame: a _PyInterpreterFrame executing code unit `unit` (prev_instr).
func (w *world312) frame(code, prev uint64, unit int, owner byte, locals ...uint64) uint64 {
	a := w.alloc(int(w.l.FrameLocalsplus) + 8*len(locals))
	w.put64(a+w.l.FrameCode, code)
	w.put64(a+w.l.FramePrevious, prev)
	w.put64(a+w.l.FrameInstr, code+w.l.CodeAdaptive+2*uint64(unit))
	w.at(a+w.l.FrameOwner, 1)[0] = owner
	for i, v := range locals {
		w.put64(a+w.l.FrameLocalsplus+8*uint64(i), v)
	}
	return a
}

func (w *world312) tstate(interp, next, top, ident, native uint64) uint64 {
	a := w.alloc(int(w.l.TstateNativeThreadID) + 8)
	cframe := w.alloc(32)
	w.put64(cframe+uint64(w.l.CFrameCurrentFrame), top)
	w.put64(a+w.l.TstateNext, next)
	w.put64(a+w.l.TstateInterp, interp)
	w.put64(a+w.l.TstateFrame, cframe)
	w.put64(a+w.l.TstateThreadID, ident)
	w.put64(a+w.l.TstateNativeThreadID, native)
	return a
}

func (w *world312) info() *RuntimeInfo {
	syms := map[string]uint64{}
	for k, v := range w.syms {
		syms[k] = v
	}
	return &RuntimeInfo{Binary: "/usr/lib/libpython3.12.so.1.0", Runtime: w.base, Syms: syms}
}

func (w *world312) snapshot() *Snapshot {
	s := &Snapshot{Pid: 4242}
	s.Add(w.base, w.buf)
	return s
}

// goldenCode returns a real 3.12 code object's table and lines by name.
func goldenCode(t testing.TB, minor int, name string) lineCode {
	t.Helper()
	for _, c := range loadLineGolden(t, minor).Codes {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no code %q in the 3.%d golden", name, minor)
	return lineCode{}
}

// standardWorld: two threads. The newest ("worker", holding the GIL) runs
// loops() called from <module> through a C-stack shim frame; the main
// thread runs simple(). As in a live 3.12, each chain ends at the outermost
// evaluator's entry shim (previous NULL): a whole stack.
func standardWorld(t testing.TB) (*world312, []Thread) {
	w := newWorld312(t)
	loops := goldenCode(t, 12, "loops/loops")
	simple := goldenCode(t, 12, "simple/simple")
	module := goldenCode(t, 12, "loops")

	cLoops := w.code("loops", "loops.py", loops.FirstLineno, loops.table(t), "n", "items", "total", "i", "x")
	cModule := w.code("<module>", "loops.py", module.FirstLineno, module.table(t))
	cShim := w.code("<interpreter trampoline>", "<shim>", 0, nil)

	modFrame := w.frame(cModule, w.frame(cShim, 0, 0, 3), 3, 0)
	shim := w.frame(cShim, modFrame, 0, 3)
	list := w.obj(w.syms["PyList_Type"], 40)
	w.put64(list+w.l.ListSize, 3)
	loopsFrame := w.frame(cLoops, shim, 30, 0,
		w.long(10), list, w.long(0), 0, w.str("處理 ü"))
	cSimple := w.code("simple", "simple.py", simple.FirstLineno, simple.table(t), "a", "b", "f", "none", "yes", "tup", "d", "neg")
	fl := w.obj(w.syms["PyFloat_Type"], 24)
	w.put64(fl+w.l.FloatValue, 0x3ff8000000000000) // 1.5
	neg := w.long(7)
	w.put64(neg+w.l.LongTag, 1<<3|2) // -7
	simpleFrame := w.frame(cSimple, w.frame(cShim, 0, 0, 3), 6, 0, w.long(1<<40), w.bytesObj([]byte("a'\x00")), fl,
		w.syms["_Py_NoneStruct"], w.syms["_Py_TrueStruct"], w.tuple(fl, fl), w.dict(w.str("k"), fl), neg)

	interp := w.alloc(int(w.l.InterpModules) + 8)
	gil := w.alloc(32)
	mainTs := w.tstate(interp, 0, simpleFrame, 0x7f0000aaaa00, 1001)
	workerTs := w.tstate(interp, mainTs, loopsFrame, 0x7f0000bbbb00, 1002)
	w.put64(w.base+w.l.RuntimeInterpretersHead, interp)
	w.put64(interp+w.l.InterpThreadsHead, workerTs)
	w.put64(interp+w.l.InterpCevalGIL, gil)
	w.put32(gil+w.l.GILLocked, 1)
	w.put64(gil+w.l.GILLastHolder, workerTs)

	worker := w.obj(w.syms["Thread"], 32) // __dict__ through tp_dictoffset
	w.put64(worker+16, w.dict(w.str("_ident"), w.long(0x7f0000bbbb00), w.str("_name"), w.str("worker-1")))
	mainThread := w.managedObj(w.syms["ManagedThread"], []string{"_target", "_name"},
		[]uint64{w.syms["_Py_NoneStruct"], w.str("MainThread")})
	active := w.dict(w.long(0x7f0000aaaa00), mainThread, w.long(0x7f0000bbbb00), worker)
	threading := w.obj(w.syms["PyModule_Type"], 32)
	w.put64(threading+w.l.ModuleDict, w.dict(w.str("_shutdown"), w.syms["_Py_NoneStruct"], w.str("_active"), active))
	w.put64(interp+w.l.InterpModules, w.dict(w.str("sys"), w.syms["_Py_NoneStruct"], w.str("threading"), threading))

	line := func(c lineCode, unit int) int { return *c.Lines[unit] }
	want := []Thread{
		{Addr: workerTs, ThreadID: 0x7f0000bbbb00, NativeID: 1002, Name: "worker-1", HoldsGIL: true, Consistent: true,
			Frames: []Frame{
				{Function: "loops", File: "loops.py", Line: line(loops, 30), Code: cLoops, Entry: true, Addr: loopsFrame, Locals: []Local{
					{Name: "n", Type: "int", Value: "10"}, {Name: "items", Type: "list", Value: "len 3"},
					{Name: "total", Type: "int", Value: "0"}, {Name: "x", Type: "str", Value: "'處理 ü'"}}},
				{Function: "<module>", File: "loops.py", Line: line(module, 3), Code: cModule, Entry: true, Addr: modFrame},
			}},
		{Addr: mainTs, ThreadID: 0x7f0000aaaa00, NativeID: 1001, Name: "MainThread", Consistent: true,
			Frames: []Frame{
				{Function: "simple", File: "simple.py", Line: line(simple, 6), Code: cSimple, Entry: true, Addr: simpleFrame, Locals: []Local{
					{Name: "a", Type: "int", Value: "1099511627776"}, {Name: "b", Type: "bytes", Value: `b"a'\x00"`},
					{Name: "f", Type: "float", Value: "1.5"}, {Name: "none", Type: "NoneType", Value: "None"},
					{Name: "yes", Type: "bool", Value: "True"}, {Name: "tup", Type: "tuple", Value: "len 2"},
					{Name: "d", Type: "dict", Value: "len 1"}, {Name: "neg", Type: "int", Value: "-7"}}},
			}},
	}
	return w, want
}

// TestWalkSnapshot312: the walker reads the fake 3.12 world exactly:
// threads newest first, names from threading._active, the GIL holder, the
// shim frame skipped and its caller's callee marked as an entry, lines from
// real 3.12 tables, and locals rendered.
func TestWalkSnapshot312(t *testing.T) {
	w, want := standardWorld(t)
	p, err := New(w.snapshot(), 4242, w.info())
	if err != nil {
		t.Fatal(err)
	}
	if p.Version() != (Version{3, 12, 1}) {
		t.Errorf("version %s", p.Version())
	}
	got, err := p.Threads(Options{Locals: true, Names: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := codeIDs(got)
	if len(ids) != 3 {
		t.Errorf("%d distinct CodeIDs for 3 code objects: %v", len(ids), ids)
	}
	// Locals of frames without a module-level frame are compared on their own.
	if !reflect.DeepEqual(got, want) {
		t.Errorf("threads:\n got %+v\nwant %+v", got, want)
	}
	// A second walk is served from the code cache and gives the same answer.
	again, err := p.Threads(Options{Locals: true, Names: true})
	if again2 := codeIDs(again); err == nil && !reflect.DeepEqual(again2, ids) {
		t.Errorf("CodeIDs changed between cached walks: %v then %v", ids, again2)
	}
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Errorf("second walk differs: %v\n%+v", err, again)
	}
	if p.Stats.CodeHits == 0 || p.Stats.CodeMisses != 3 {
		t.Errorf("code cache stats %+v, want 3 misses then hits", p.Stats)
	}
	for _, th := range got {
		for _, f := range th.Frames {
			if !utf8.ValidString(f.Function) || !utf8.ValidString(f.File) {
				t.Errorf("invalid UTF-8 in %+v", f)
			}
		}
	}
}

// TestWalkSnapshotNoneLocal: a local bound to None renders as None.
func TestWalkSnapshotNoneLocal(t *testing.T) {
	w := newWorld312(t)
	simple := goldenCode(t, 12, "simple/simple")
	c := w.code("simple", "simple.py", simple.FirstLineno, simple.table(t), "a")
	shim := w.frame(w.code("<interpreter trampoline>", "<shim>", 0, nil), 0, 0, 3)
	f := w.frame(c, shim, 1, 0, w.syms["_Py_NoneStruct"])
	interp := w.alloc(int(w.l.InterpModules) + 8)
	ts := w.tstate(interp, 0, f, 1, 2)
	w.put64(w.base+w.l.RuntimeInterpretersHead, interp)
	w.put64(interp+w.l.InterpThreadsHead, ts)
	p, err := New(w.snapshot(), 1, w.info())
	if err != nil {
		t.Fatal(err)
	}
	th, err := p.Threads(Options{Locals: true})
	if err != nil || len(th) != 1 || len(th[0].Frames) != 1 {
		t.Fatalf("got (%+v, %v)", th, err)
	}
	want := []Local{{Name: "a", Type: "NoneType", Value: "None"}}
	if got := th[0].Frames[0].Locals; !reflect.DeepEqual(got, want) {
		t.Errorf("locals %+v, want %+v", got, want)
	}
}

// loopedWorld returns the standard world's bytes with the worker's outermost
// frame pointing back to its innermost, and the main thread state's next
// pointing back to the worker's.
func loopedWorld(w *world312, want []Thread) []byte {
	b := append([]byte(nil), w.buf...)
	u64 := func(a uint64) uint64 { return binary.LittleEndian.Uint64(b[a-w.base:]) }
	top := u64(u64(want[0].Addr+w.l.TstateFrame) + uint64(w.l.CFrameCurrentFrame))
	outer := u64(u64(top+w.l.FramePrevious) + w.l.FramePrevious)
	binary.LittleEndian.PutUint64(b[outer+w.l.FramePrevious-w.base:], top)
	binary.LittleEndian.PutUint64(b[want[1].Addr+w.l.TstateNext-w.base:], want[0].Addr)
	return b
}

// TestWalkSnapshotCycles: a frame cycle ends the walk of that thread with an
// error; a thread-list cycle visits each thread once.
func TestWalkSnapshotCycles(t *testing.T) {
	w, want := standardWorld(t)
	s := &Snapshot{Pid: 4242}
	s.Add(w.base, loopedWorld(w, want))
	p, err := New(s, 4242, w.info())
	if err != nil {
		t.Fatal(err)
	}
	th, err := p.Threads(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(th) != 2 {
		t.Fatalf("%d threads, want 2 (each once)", len(th))
	}
	// How the cycle is noticed is the walker's business (a repeated frame,
	// or a caller above its callee in one data-stack chunk); that it is, is not.
	if th[0].Err == nil || th[0].Consistent || len(th[0].Frames) > 2 {
		t.Errorf("worker: err %v consistent %v, %d frames; want an error and at most the 2 real frames",
			th[0].Err, th[0].Consistent, len(th[0].Frames))
	}
	if th[1].Err != nil || len(th[1].Frames) != 1 {
		t.Errorf("main: %+v", th[1])
	}
}

// codeIDs collects each frame's CodeID by code address and clears it, so the
// rest of the result can be compared with a table that does not know them.
func codeIDs(ths []Thread) map[uint64]uint64 {
	ids := map[uint64]uint64{}
	for i := range ths {
		for j := range ths[i].Frames {
			f := &ths[i].Frames[j]
			ids[f.Code] = f.CodeID
			f.CodeID = 0
		}
	}
	return ids
}

// TestWalkEvalLoopEntering312: 3.12 points the thread state at a new
// _PyCFrame before it sets that cframe's current frame (stack garbage
// until then). The walk reads the outer cframe's stack — the Python stack
// of that instant, with its link — and calls it consistent; a cframe
// without an outer one stays an error.
func TestWalkEvalLoopEntering312(t *testing.T) {
	w := newWorld312(t)
	simple := goldenCode(t, 12, "simple/simple")
	c := w.code("simple", "simple.py", simple.FirstLineno, simple.table(t))
	shim := w.frame(w.code("<interpreter trampoline>", "<shim>", 0, nil), 0, 0, 3)
	f := w.frame(c, shim, 1, 0)
	interp := w.alloc(int(w.l.InterpModules) + 8)
	ts := w.tstate(interp, 0, f, 1, 2)
	outer := w.alloc(32)
	w.put64(outer+uint64(w.l.CFrameCurrentFrame), f)
	inner := w.alloc(32)
	w.put64(inner+uint64(w.l.CFrameCurrentFrame), 0x3) // not set yet
	w.put64(inner+w.l.CFramePrevious, outer)
	w.put64(ts+w.l.TstateFrame, inner)
	w.put64(w.base+w.l.RuntimeInterpretersHead, interp)
	w.put64(interp+w.l.InterpThreadsHead, ts)
	p, err := New(w.snapshot(), 1, w.info())
	if err != nil {
		t.Fatal(err)
	}
	th, err := p.Threads(Options{Links: true})
	if err != nil || len(th) != 1 || !th[0].Consistent || th[0].Err != nil || len(th[0].Frames) != 1 {
		t.Fatalf("entering: got (%+v, %v)", th, err)
	}
	if fr := th[0].Frames[0]; fr.Function != "simple" || !fr.Entry || fr.Link != shim {
		t.Errorf("entering: frame %+v, want simple, entered from C, linked at the shim 0x%x", fr, shim)
	}
	w.put64(inner+w.l.CFramePrevious, 0) // garbage and no outer cframe: not a stack
	p, err = New(w.snapshot(), 1, w.info())
	if err != nil {
		t.Fatal(err)
	}
	if th, err := p.Threads(Options{}); err != nil || len(th) != 1 || th[0].Consistent || th[0].Err == nil {
		t.Errorf("garbage without an outer cframe: got (%+v, %v), want an inconsistent thread with its error", th, err)
	}
}

// TestWalkDeepOrLooped: a chain of distinct frames deeper than MaxDepth
// is its innermost MaxDepth frames, marked truncated, consistent, with no
// error; a chain that loops back (longer than a window's worth, shorter
// than MaxDepth) is an error naming the loop, not a truncation.
func TestWalkDeepOrLooped(t *testing.T) {
	simple := goldenCode(t, 12, "simple/simple")
	walk := func(n int, loop bool) Thread {
		w := newWorld312(t)
		c := w.code("simple", "simple.py", simple.FirstLineno, simple.table(t))
		shim := w.frame(w.code("<interpreter trampoline>", "<shim>", 0, nil), 0, 0, 3)
		// Owned by generators: frames anywhere, so that only the walk's
		// own loop check can tell a loop (no data-stack order).
		first := w.frame(c, shim, 1, 1)
		f := first
		for i := 1; i < n; i++ {
			f = w.frame(c, f, 1, 1)
		}
		if loop {
			w.put64(first+w.l.FramePrevious, f)
		}
		interp := w.alloc(int(w.l.InterpModules) + 8)
		ts := w.tstate(interp, 0, f, 1, 2)
		w.put64(w.base+w.l.RuntimeInterpretersHead, interp)
		w.put64(interp+w.l.InterpThreadsHead, ts)
		p, err := New(w.snapshot(), 1, w.info())
		if err != nil {
			t.Fatal(err)
		}
		th, err := p.Threads(Options{Partial: true})
		if err != nil || len(th) != 1 {
			t.Fatalf("n %d loop %v: (%+v, %v)", n, loop, th, err)
		}
		return th[0]
	}
	if th := walk(MaxDepth+900, false); !th.Truncated || !th.Consistent || th.Err != nil || len(th.Frames) != MaxDepth {
		t.Errorf("deep: truncated %v consistent %v err %v, %d frames: want truncated, consistent, no error, %d frames",
			th.Truncated, th.Consistent, th.Err, len(th.Frames), MaxDepth)
	}
	if th := walk(300, false); th.Truncated || th.Err != nil || len(th.Frames) != 300 {
		t.Errorf("300 deep: truncated %v err %v, %d frames", th.Truncated, th.Err, len(th.Frames))
	}
	th := walk(700, true)
	if th.Truncated || th.Consistent || !errors.Is(th.Err, ErrTorn) || !strings.Contains(fmt.Sprint(th.Err), "loops") {
		t.Errorf("loop: truncated %v consistent %v err %v: want an error naming the loop", th.Truncated, th.Consistent, th.Err)
	}
}
