package pyframes

import (
	"encoding/binary"
	"fmt"
)

// Free-threaded builds (Py_GIL_DISABLED: 3.13t, 3.14t), as told by the
// _Py_DebugOffsets flag free_threaded = 1. What differs from a GIL build of
// the same minor version (CPython's Include/object.h, Include/cpython/
// unicodeobject.h, Include/internal/pycore_{code,interpframe_structs,
// stackref}.h at v3.13.0 and v3.14.0; ../shared/CPYTHON.md §3, §4):
//
//   - PyObject is {ob_tid, ob_flags, ob_mutex, ob_gc_bits, ob_ref_local,
//     ob_ref_shared, ob_type}: 32 bytes, not 16, so every field after the
//     header moves by 16. The table publishes most offsets; the few the
//     walker takes from commonObjects (tp_basicsize, tp_dictoffset,
//     ma_used, md_dict, ob_ref of a cell, ht_cached_keys) are shifted by
//     the growth, computed from pyobject.size.
//   - 3.14t PyASCIIObject.state: interned is a whole byte, so kind, compact
//     and ascii sit in the second byte (bits 8–10, 11, 12). 3.13t keeps the
//     GIL build's bits (interned:2; checked in its v3.13.15 header).
//   - No PyGC_Head before a GC object: the managed dict pointer of an
//     instance is one word before it (MANAGED_DICT_OFFSET -1 word), not 3.
//   - 3.14t: each thread may run its own copy of a code object's bytecode
//     (thread-local bytecode): when the frame's tlbc_index is not 0, its
//     instr_ptr points into co_tlbc->entries[tlbc_index] (a _PyCodeArray
//     {Py_ssize_t size; char *entries[]}), not into co_code_adaptive.
//     f_executable carries the deferred-refcount tag (bit 0): masked like
//     every 3.14 _PyStackRef.
//   - There is no GIL: no thread holds one, GILHolder is 0 and GILRange is
//     empty, so nothing is ever attributed to a GIL — unless the
//     interpreter enabled its GIL at run time (PYTHON_GIL=1, or an
//     extension that does not declare itself free-threading safe): the
//     gil struct's `enabled` (published in the debug offsets) is read
//     with it, and while it is set the GIL is read as on a GIL build.

// ErrNoGIL is what asking for a GIL gets on a free-threaded build.
var ErrNoGIL = fmt.Errorf("no GIL in this build (free-threaded CPython)")

// gilObjectHeader is sizeof(PyObject) on GIL builds (ob_refcnt, ob_type).
const gilObjectHeader = 16

// objectHeaderGrowth is how much bigger the object header is than on a
// GIL build: 16 on free-threaded builds, else 0.
func (l *Layout) objectHeaderGrowth() uint64 {
	if !l.FreeThreaded {
		return 0
	}
	return 16
}

// freeThreadedObjects marks l free-threaded and moves the commonObjects
// offsets the debug offsets do not publish past the bigger header.
func freeThreadedObjects(l *Layout, d *DebugOffsets) error {
	v := VersionHex(d.Version)
	hs := d.Fields["pyobject.size"]
	if hs != gilObjectHeader+16 {
		return &UnsupportedVersionError{Version: v, Why: fmt.Sprintf("free-threaded build with a %d-byte object header (want 32)", hs)}
	}
	l.FreeThreaded = true
	g := l.objectHeaderGrowth()
	l.TypeBasicSize += g
	l.TypeDictOffset += g
	l.DictUsed += g
	l.ModuleDict += g
	l.CellRef += g
	l.ManagedDictBack = 8
	l.UnicodeByteInterned = v.Minor >= 14
	return nil
}

// unicodeState decodes PyASCIIObject.state from the object header.
func (l *Layout) unicodeState(hdr []byte) (kind int, compact, ascii bool) {
	if !l.UnicodeByteInterned {
		return decodeState(hdr[l.UnicodeState])
	}
	// interned is the first byte; kind:3, compact:1, ascii:1 follow in the
	// second (the padding above them is not trusted).
	b := hdr[l.UnicodeState+1]
	return int(b & 7), b&(1<<3) != 0, b&(1<<4) != 0
}

// FreeThreaded reports whether the target is a free-threaded build.
func (p *Process) FreeThreaded() bool { return p.Layout.FreeThreaded }

// maxTLBC bounds a _PyCodeArray: one entry per thread that ran the code.
const maxTLBC = 1 << 16

// instrBase returns where a frame's instruction pointer counts from: the
// code object's co_code_adaptive, or on 3.14t the thread-local copy the
// frame runs (tlbc_index != 0). Not cached: a copy is freed when no thread
// uses its index any more, and the index is handed to the next new thread.
func (p *Process) instrBase(code uint64, tlbc int32) uint64 {
	l := p.Layout
	base := code + l.CodeAdaptive
	if tlbc <= 0 || tlbc >= maxTLBC || l.CodeTLBC == 0 {
		return base
	}
	arr, err := p.objs.u64(code + l.CodeTLBC)
	if err != nil || arr == 0 {
		return base
	}
	var hdr [8]byte
	if p.objs.mem.Read(arr, hdr[:]) != nil || int64(binary.LittleEndian.Uint64(hdr[:])) <= int64(tlbc) {
		return base
	}
	b, err := p.objs.u64(arr + 8 + 8*uint64(tlbc))
	if err != nil || b == 0 {
		return base
	}
	return b
}

// moved shifts a 3.12/3.13 asyncio layout's object offsets past an object
// header g bytes bigger (3.13t: 16; measured with
// testdata/targets/asyncio_layout.py on a 3.13.15 --disable-gil build: task
// fields, set fields and tp_base all +16; gi_frame_state and gi_iframe +16
// from cpython/genobject.h). The frame's stacktop is not in an object.
func (lt legacyAsyncLayout) moved(g uint64) legacyAsyncLayout {
	if g == 0 {
		return lt
	}
	for _, f := range []*uint64{&lt.taskSize, &lt.taskFutWaiter, &lt.taskCoro, &lt.taskName, &lt.futState, &lt.genFrameState, &lt.genIFrame,
		&lt.setUsed, &lt.setMask, &lt.setTable, &lt.weakrefObject, &lt.typeBase} {
		*f += g
	}
	lt.source += " (free-threaded: object offsets +16)"
	return lt
}
