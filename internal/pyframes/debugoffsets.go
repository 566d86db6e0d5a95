package pyframes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The _Py_DebugOffsets table starts _PyRuntime from 3.13 on: an 8-byte cookie,
// the PY_VERSION_HEX, a free-threaded flag, then uint64 fields grouped by the
// C struct they describe. Its own layout differs per minor version; the field
// order below is that of CPython's headers:
//   3.13: Include/internal/pycore_runtime.h (_Py_DebugOffsets) @v3.13.0
//   3.14: Include/internal/pycore_debug_offsets.h @v3.14.0
//   3.15: Include/internal/pycore_debug_offsets.h @v3.15.0
// Every group but llist_node begins with the struct's size.

// DebugCookie marks the table.
var DebugCookie = []byte("xdebugpy")

type offGroup struct {
	name   string
	fields []string // without the leading "size" unless noSize
	noSize bool
	// mixedBases: offsets count from other structs, so "< size" means nothing.
	mixedBases bool
}

var debugLayout313 = []offGroup{
	{name: "runtime_state", fields: []string{"finalizing", "interpreters_head"}},
	{name: "interpreter_state", fields: []string{"id", "next", "threads_head", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder"}, mixedBases: true},
	{name: "thread_state", fields: []string{"prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk", "status"}},
	{name: "interpreter_frame", fields: []string{"previous", "executable", "instr_ptr", "localsplus", "owner"}},
	{name: "code_object", fields: []string{"filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive"}},
	{name: "pyobject", fields: []string{"ob_type"}},
	{name: "type_object", fields: []string{"tp_name", "tp_repr", "tp_flags"}},
	{name: "tuple_object", fields: []string{"ob_item", "ob_size"}},
	{name: "list_object", fields: []string{"ob_item", "ob_size"}},
	{name: "dict_object", fields: []string{"ma_keys", "ma_values"}},
	{name: "float_object", fields: []string{"ob_fval"}},
	{name: "long_object", fields: []string{"lv_tag", "ob_digit"}},
	{name: "bytes_object", fields: []string{"ob_size", "ob_sval"}},
	{name: "unicode_object", fields: []string{"state", "length", "asciiobject_size"}},
	{name: "gc", fields: []string{"collecting"}},
}

var debugLayout314 = []offGroup{
	{name: "runtime_state", fields: []string{"finalizing", "interpreters_head"}},
	{name: "interpreter_state", fields: []string{"id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder", "code_object_generation", "tlbc_generation"}, mixedBases: true},
	{name: "thread_state", fields: []string{"prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk", "status"}},
	{name: "interpreter_frame", fields: []string{"previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"}},
	{name: "code_object", fields: []string{"filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc"}},
	{name: "pyobject", fields: []string{"ob_type"}},
	{name: "type_object", fields: []string{"tp_name", "tp_repr", "tp_flags"}},
	{name: "tuple_object", fields: []string{"ob_item", "ob_size"}},
	{name: "list_object", fields: []string{"ob_item", "ob_size"}},
	{name: "set_object", fields: []string{"used", "table", "mask"}},
	{name: "dict_object", fields: []string{"ma_keys", "ma_values"}},
	{name: "float_object", fields: []string{"ob_fval"}},
	{name: "long_object", fields: []string{"lv_tag", "ob_digit"}},
	{name: "bytes_object", fields: []string{"ob_size", "ob_sval"}},
	{name: "unicode_object", fields: []string{"state", "length", "asciiobject_size"}},
	{name: "gc", fields: []string{"collecting"}},
	{name: "gen_object", fields: []string{"gi_name", "gi_iframe", "gi_frame_state"}},
	{name: "llist_node", fields: []string{"next", "prev"}, noSize: true, mixedBases: true},
	{name: "debugger_support", fields: []string{"eval_breaker", "remote_debugger_support", "remote_debugging_enabled", "debugger_pending_call", "debugger_script_path", "debugger_script_path_size"}, noSize: true, mixedBases: true},
}

var debugLayout315 = []offGroup{
	{name: "runtime_state", fields: []string{"finalizing", "interpreters_head"}},
	{name: "interpreter_state", fields: []string{"id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder", "code_object_generation", "tlbc_generation"}, mixedBases: true},
	{name: "thread_state", fields: []string{"prev", "next", "interp", "current_frame", "base_frame", "last_profiled_frame", "last_profiled_frame_seq", "thread_id", "native_thread_id", "datastack_chunk", "status", "holds_gil", "gil_requested", "current_exception", "exc_state"}},
	{name: "err_stackitem", fields: []string{"exc_value"}, noSize: true, mixedBases: true},
	{name: "interpreter_frame", fields: []string{"previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"}},
	{name: "code_object", fields: []string{"filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc"}},
	{name: "pyobject", fields: []string{"ob_type"}},
	{name: "type_object", fields: []string{"tp_name", "tp_repr", "tp_flags", "tp_basicsize", "tp_dictoffset"}},
	{name: "heap_type_object", fields: []string{"ht_cached_keys"}},
	{name: "tuple_object", fields: []string{"ob_item", "ob_size"}},
	{name: "list_object", fields: []string{"ob_item", "ob_size"}},
	{name: "set_object", fields: []string{"used", "table", "mask"}},
	{name: "dict_object", fields: []string{"ma_keys", "ma_values"}},
	{name: "float_object", fields: []string{"ob_fval"}},
	{name: "long_object", fields: []string{"lv_tag", "ob_digit"}},
	{name: "bytes_object", fields: []string{"ob_size", "ob_sval"}},
	{name: "unicode_object", fields: []string{"state", "length", "asciiobject_size", "compactunicodeobject_size"}, mixedBases: true},
	{name: "gc", fields: []string{"collecting", "frame", "generation_stats_size", "generation_stats"}, mixedBases: true},
	{name: "gen_object", fields: []string{"gi_name", "gi_iframe", "gi_frame_state"}},
	{name: "llist_node", fields: []string{"next", "prev"}, noSize: true, mixedBases: true},
	{name: "debugger_support", fields: []string{"eval_breaker", "remote_debugger_support", "remote_debugging_enabled", "debugger_pending_call", "debugger_script_path", "debugger_script_path_size"}, noSize: true, mixedBases: true},
}

func debugLayoutFor(minor int) []offGroup {
	switch minor {
	case 13:
		return debugLayout313
	case 14:
		return debugLayout314
	case 15:
		return debugLayout315
	}
	return nil
}

// DebugOffsets is a parsed, validated table.
type DebugOffsets struct {
	Version      uint64 // PY_VERSION_HEX
	FreeThreaded bool
	Fields       map[string]uint64 // "group.field", including "group.size"
}

// maxStructSize rejects garbage: no CPython struct the walker reads is near this.
const maxStructSize = 1 << 20

var (
	ErrNoCookie = errors.New("no xdebugpy cookie")
)

// VersionHex splits a PY_VERSION_HEX.
func VersionHex(h uint64) Version {
	return Version{Major: int(h >> 24 & 0xff), Minor: int(h >> 16 & 0xff), Micro: int(h >> 8 & 0xff)}
}

// DebugTableSize is the number of bytes ParseDebugOffsets needs for a minor
// version, or 0 when the version has no known table layout.
func DebugTableSize(minor int) int {
	gs := debugLayoutFor(minor)
	if gs == nil {
		return 0
	}
	n := 24
	for _, g := range gs {
		n += 8 * len(g.fields)
		if !g.noSize {
			n += 8
		}
	}
	return n
}

// ParseDebugOffsets validates and decodes the table at the start of b. It
// returns an error and no table for anything it does not trust.
func ParseDebugOffsets(b []byte) (*DebugOffsets, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("debug offsets: %d bytes, need at least 24", len(b))
	}
	if !bytes.Equal(b[:8], DebugCookie) {
		return nil, ErrNoCookie
	}
	hex := binary.LittleEndian.Uint64(b[8:])
	v := VersionHex(hex)
	if hex>>32 != 0 || v.Major != 3 {
		return nil, fmt.Errorf("debug offsets: implausible version 0x%x", hex)
	}
	layout := debugLayoutFor(v.Minor)
	if layout == nil {
		return nil, &UnsupportedVersionError{Version: v, Why: "no known debug-offsets layout"}
	}
	need := DebugTableSize(v.Minor)
	if len(b) < need {
		return nil, fmt.Errorf("debug offsets for %s: %d bytes, need %d", v, len(b), need)
	}
	ft := binary.LittleEndian.Uint64(b[16:])
	if ft > 1 {
		return nil, fmt.Errorf("debug offsets: free_threaded flag %d is not 0 or 1", ft)
	}
	d := &DebugOffsets{Version: hex, FreeThreaded: ft == 1, Fields: make(map[string]uint64, need/8)}
	off := 24
	next := func() uint64 { x := binary.LittleEndian.Uint64(b[off:]); off += 8; return x }
	for _, g := range layout {
		size := uint64(0)
		if !g.noSize {
			size = next()
			if size == 0 || size > maxStructSize {
				return nil, fmt.Errorf("debug offsets: %s.size %d at table offset %d is implausible", g.name, size, off-8)
			}
			d.Fields[g.name+".size"] = size
		}
		for _, f := range g.fields {
			x := next()
			if x > maxStructSize {
				return nil, fmt.Errorf("debug offsets: %s.%s = %d at table offset %d is implausible", g.name, f, x, off-8)
			}
			if !g.mixedBases && !g.noSize && x >= size {
				return nil, fmt.Errorf("debug offsets: %s.%s = %d lies outside the struct (size %d)", g.name, f, x, size)
			}
			d.Fields[g.name+"."+f] = x
		}
	}
	return d, nil
}

// layoutFromDebugOffsets builds a Layout from the table plus the few facts the
// table does not publish for that version.
func layoutFromDebugOffsets(d *DebugOffsets) (*Layout, error) {
	v := VersionHex(d.Version)
	f := d.Fields
	get := func(k string) uint64 { return f[k] }
	l := commonObjects()
	if d.FreeThreaded {
		if err := freeThreadedObjects(l, d); err != nil {
			return nil, err
		}
	}
	l.Version = v
	l.Source = fmt.Sprintf("debug offsets (_Py_DebugOffsets %d.%d)", v.Major, v.Minor)

	l.RuntimeInterpretersHead = get("runtime_state.interpreters_head")
	l.InterpNext = get("interpreter_state.next")
	l.InterpID = get("interpreter_state.id")
	l.InterpThreadsHead = get("interpreter_state.threads_head")
	l.InterpModules = get("interpreter_state.imports_modules")
	l.InterpCevalGIL = get("interpreter_state.ceval_gil")
	gil := get("interpreter_state.gil_runtime_state")
	if h, lk := get("interpreter_state.gil_runtime_state_holder"), get("interpreter_state.gil_runtime_state_locked"); h > gil && lk > gil {
		// switch_number is not published: it follows int locked (pycore_gil.h 3.13–3.15).
		l.GILLastHolder, l.GILLocked, l.GILSwitchNumber = h-gil, lk-gil, lk-gil+8
		switch en := get("interpreter_state.gil_runtime_state_enabled"); {
		case !d.FreeThreaded:
		case en != 0 && en >= gil && en < h:
			l.GILEnabled, l.GILEnabledKnown = en-gil, true
		case h-gil == 16:
			// 3.13t publishes 0: int enabled is the struct's first field on
			// free-threaded builds, before unsigned long interval and
			// last_holder (pycore_gil.h 3.13, 3.14).
			l.GILEnabled, l.GILEnabledKnown = 0, true
		}
	}

	l.TstateNext = get("thread_state.next")
	l.TstateInterp = get("thread_state.interp")
	l.TstateFrame = get("thread_state.current_frame")
	l.TstateThreadID = get("thread_state.thread_id")
	l.TstateNativeThreadID = get("thread_state.native_thread_id")
	l.TstateHoldsGIL = get("thread_state.holds_gil")
	l.TstateBaseFrame = get("thread_state.base_frame")

	l.FramePrevious = get("interpreter_frame.previous")
	l.FrameCode = get("interpreter_frame.executable")
	l.FrameInstr = get("interpreter_frame.instr_ptr")
	l.FrameOwner = get("interpreter_frame.owner")
	l.FrameLocalsplus = get("interpreter_frame.localsplus")
	l.FrameSize = max(l.FramePrevious, l.FrameCode, l.FrameInstr) + 8
	l.FrameSize = max(l.FrameSize, l.FrameOwner+1)
	if d.FreeThreaded && f["interpreter_frame.tlbc_index"] != 0 {
		l.FrameTLBCIndex = f["interpreter_frame.tlbc_index"]
		l.FrameSize = max(l.FrameSize, l.FrameTLBCIndex+4)
	}
	// Owner values (Include/internal/pycore_frame.h / pycore_interpframe_structs.h):
	// 3.13 CSTACK=3; 3.14 INTERPRETER=3, CSTACK=4; 3.15 INTERPRETER=3.
	l.FrameOwnerSkip = 3
	switch v.Minor {
	case 13:
		l.FrameOwnerCStack = 3
	case 14:
		l.FrameOwnerCStack = 4
	}
	l.CodeTagged = v.Minor >= 14
	if l.FrameSize > 256 {
		return nil, fmt.Errorf("debug offsets: a frame header of %d bytes is implausible", l.FrameSize)
	}

	l.CodeFilename = get("code_object.filename")
	l.CodeName = get("code_object.name")
	l.CodeQualname = get("code_object.qualname")
	l.CodeLinetable = get("code_object.linetable")
	l.CodeFirstLineno = get("code_object.firstlineno")
	l.CodeAdaptive = get("code_object.co_code_adaptive")
	l.CodeLocalsplusNames = get("code_object.localsplusnames")
	l.CodeLocalsplusKinds = get("code_object.localspluskinds")
	l.CodeSize = max(l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLinetable, l.CodeLocalsplusNames, l.CodeLocalsplusKinds) + 8
	l.CodeSize = max(l.CodeSize, l.CodeFirstLineno+4)
	if v.Minor == 13 {
		codeVersion313(l, f)
	}
	if d.FreeThreaded && f["code_object.co_tlbc"] != 0 {
		l.CodeTLBC = f["code_object.co_tlbc"] // read on its own when a frame runs a copy
	}

	l.ObType = get("pyobject.ob_type")
	l.TypeName = get("type_object.tp_name")
	l.TypeFlags = get("type_object.tp_flags")
	if x, ok := f["type_object.tp_basicsize"]; ok {
		l.TypeBasicSize = x
	}
	if x, ok := f["type_object.tp_dictoffset"]; ok {
		l.TypeDictOffset = x
	}
	l.TupleItems, l.TupleSize = get("tuple_object.ob_item"), get("tuple_object.ob_size")
	l.ListItems, l.ListSize = get("list_object.ob_item"), get("list_object.ob_size")
	l.DictKeys, l.DictValues = get("dict_object.ma_keys"), get("dict_object.ma_values")
	l.FloatValue = get("float_object.ob_fval")
	l.LongTag, l.LongDigits = get("long_object.lv_tag"), get("long_object.ob_digit")
	l.BytesSize, l.BytesData = get("bytes_object.ob_size"), get("bytes_object.ob_sval")
	l.UnicodeState = get("unicode_object.state")
	l.UnicodeLength = get("unicode_object.length")
	l.ASCIISize = get("unicode_object.asciiobject_size")
	// sizeof(PyCompactUnicodeObject) = PyASCIIObject + utf8_length + utf8.
	l.CompactSize = l.ASCIISize + 16
	if x, ok := f["unicode_object.compactunicodeobject_size"]; ok {
		l.CompactSize = x
	}
	// ht_cached_keys is published from 3.15; measured on 3.13.0 and 3.14 sid.
	if x, ok := f["heap_type_object.ht_cached_keys"]; ok {
		l.HeapCachedKeys = x
	} else {
		l.HeapCachedKeys = 880 + l.objectHeaderGrowth()
	}
	return l, nil
}

// UnsupportedVersionError names the version and the supported range.
type UnsupportedVersionError struct {
	Version Version
	Why     string
}

func (e *UnsupportedVersionError) Error() string {
	s := fmt.Sprintf("unsupported Python %s (pyobs supports %s)", e.Version, SupportedRange)
	if e.Why != "" {
		s += ": " + e.Why
	}
	return s
}
