package pyframes

import "fmt"

// Version is a CPython major.minor.micro.
type Version struct{ Major, Minor, Micro int }

func (v Version) String() string {
	if v.Micro < 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

func (v Version) atLeast(minor int) bool { return v.Major == 3 && v.Minor >= minor }

// Supported range, named in the error for anything outside it.
const (
	MinMinor = 10
	MaxMinor = 15
)

// SupportedRange is what the unsupported-version error names.
var SupportedRange = fmt.Sprintf("3.%d to 3.%d", MinMinor, MaxMinor)

// Layout is every offset the walker uses, for one interpreter build. 0 means
// "not present in this version" for optional fields; required fields are
// checked in validate. All offsets are x86_64 (LP64) GIL builds.
type Layout struct {
	Version Version
	Source  string // where the numbers came from: "debug offsets" or a table tag
	// FreeThreaded: a Py_GIL_DISABLED build (3.13t/3.14t): a bigger object
	// header, str state bits moved, and no GIL (freethreaded.go).
	FreeThreaded bool

	// _PyRuntimeState
	RuntimeInterpretersHead uint64
	RuntimeTstateCurrent    uint64 // ≤3.11: gilstate.tstate_current (NULL while the GIL is free)

	// PyInterpreterState
	InterpNext        uint64
	InterpID          uint64 // int64 id: the runtime's own number (main = 0); measured live on 3.10–3.12
	InterpThreadsHead uint64
	InterpModules     uint64 // sys.modules
	InterpCevalGIL    uint64 // 3.12+: pointer to struct _gil_runtime_state
	GILLastHolder     uint64 // within the gil struct
	GILLocked         uint64 // within the gil struct
	GILSwitchNumber   uint64 // within the gil struct: bumped by each take by a thread other than last_holder
	// GILEnabled (free-threaded, GILEnabledKnown): int enabled within the
	// gil struct, not 0 while the interpreter runs with its GIL after all
	// (PYTHON_GIL=1, or an extension not declared free-threading safe).
	GILEnabled      uint64
	GILEnabledKnown bool

	// PyThreadState
	TstateNext           uint64
	TstateInterp         uint64
	TstateFrame          uint64 // 3.10: PyFrameObject*; 3.11/3.12: _PyCFrame*; 3.13+: _PyInterpreterFrame*
	CFrameCurrentFrame   int64  // 3.11/3.12 offset inside _PyCFrame; -1 when there is no cframe
	CFramePrevious       uint64 // 3.11/3.12 offset inside _PyCFrame (3.11's links; an eval loop entering)
	TstateThreadID       uint64
	TstateNativeThreadID uint64 // 0: not recorded (3.10)
	TstateHoldsGIL       uint64 // 3.15: int holds_gil; 0 when not published
	TstateBaseFrame      uint64 // 3.15: base_frame, where every whole chain ends; 0 when not published

	// Frames. 3.10 walks PyFrameObjects; 3.11+ _PyInterpreterFrames.
	FrameObjects     bool
	FramePrevious    uint64
	FrameCode        uint64
	FrameInstr       uint64 // 3.11+: prev_instr/instr_ptr; 3.10: int f_lasti
	FrameLineno      uint64 // 3.10: int f_lineno (non-zero only while tracing)
	FrameOwner       uint64
	FrameIsEntry     int64 // 3.11 only; -1 otherwise
	FrameLocalsplus  uint64
	FrameSize        uint64 // bytes to read for one frame header
	FrameOwnerSkip   uint8  // skip frames whose owner >= this (C-stack shims, base frames); 0: none
	FrameOwnerCStack uint8  // the C-stack shim owner value (marks an entry), 0: none
	CodeTagged       bool   // 3.14+: f_executable is a _PyStackRef with tag bits
	FrameTLBCIndex   uint64 // 3.14t: int32 tlbc_index (thread-local bytecode copy); 0: none

	// PyCodeObject
	CodeFilename        uint64
	CodeName            uint64
	CodeQualname        uint64 // 0 on 3.10 (no co_qualname)
	CodeLinetable       uint64
	CodeFirstLineno     uint64
	CodeAdaptive        uint64 // 3.11+: start of co_code_adaptive
	CodeLocalsplusNames uint64 // 3.11+; 3.10: co_varnames
	CodeLocalsplusKinds uint64 // 3.11+
	CodeNlocals         uint64 // 3.10: co_nlocals (int)
	CodeSize            uint64 // bytes to read for a code header
	CodeTLBC            uint64 // 3.14t: _PyCodeArray* co_tlbc; 0: none
	// CodeVersion (3.12/3.13): uint32 co_version, given at creation from a
	// counter that only grows (a serial: never two live code objects with
	// the same one); 0: none.
	CodeVersion uint64
	// InterpNextCodeVersion (3.13): where in PyInterpreterState that
	// counter (func_state.next_version) sits; 0: not known for this build
	// (3.12 keeps it in a global, _Py_next_func_version).
	InterpNextCodeVersion uint64

	// Objects
	ObType         uint64
	TypeName       uint64
	TypeBasicSize  uint64
	TypeFlags      uint64
	TypeDictOffset uint64
	HeapCachedKeys uint64
	UnicodeLength  uint64
	UnicodeState   uint64
	ASCIISize      uint64 // sizeof(PyASCIIObject)
	// UnicodeByteInterned (3.14t): state.interned is a whole byte, so
	// kind, compact and ascii sit in the second byte of state.
	UnicodeByteInterned bool
	ManagedDictBack     uint64 // 3.13+: the managed dict pointer sits this far before the object
	CompactSize         uint64 // sizeof(PyCompactUnicodeObject)
	BytesSize           uint64
	BytesData           uint64
	TupleSize           uint64
	TupleItems          uint64
	ListSize            uint64
	ListItems           uint64
	DictKeys            uint64
	DictValues          uint64
	DictUsed            uint64
	LongTag             uint64 // ≤3.11 ob_size, 3.12+ lv_tag
	LongDigits          uint64
	FloatValue          uint64
	ModuleDict          uint64
	CellRef             uint64
}

// Layouts for interpreters without a debug-offsets table. Each value was
// checked on this machine kind against a live build (pyenv 3.10.13, 3.11.7,
// 3.12.1; Debian 3.11.2) by scanning the interpreter's own objects with ctypes,
// and agrees with the struct definitions at those tags (Include/cpython/*.h,
// Include/internal/pycore_*.h); see ../shared/CPYTHON.md §3, §7.
func staticLayout(v Version) (*Layout, bool) {
	l := commonObjects()
	l.Version = v
	switch v.Minor {
	case 10:
		l.Source = "table 3.10 (Include/cpython/{pystate,frameobject,code}.h @v3.10.13, checked live)"
		l.RuntimeInterpretersHead = 32
		l.RuntimeTstateCurrent = 568
		l.InterpNext, l.InterpThreadsHead, l.InterpModules = 0, 8, 856
		l.InterpID = 24
		l.TstateNext, l.TstateInterp, l.TstateFrame, l.CFrameCurrentFrame = 8, 16, 24, -1
		l.TstateThreadID, l.TstateNativeThreadID = 176, 0
		l.FrameObjects = true
		l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameLineno = 24, 32, 96, 100 // f_back, f_code, f_lasti, f_lineno
		l.FrameIsEntry, l.FrameLocalsplus, l.FrameSize = -1, 352, 104
		l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLinetable, l.CodeFirstLineno = 104, 112, 0, 120, 40
		l.CodeLocalsplusNames, l.CodeNlocals, l.CodeSize = 72, 28, 128
		l.ASCIISize, l.CompactSize = 48, 72
		l.HeapCachedKeys = 872
		l.LongTag = 16
	case 11:
		l.Source = "table 3.11 (Include/internal/pycore_{frame,interp}.h @v3.11.7, checked live)"
		l.RuntimeInterpretersHead = 40
		l.RuntimeTstateCurrent = 576
		l.InterpNext, l.InterpThreadsHead, l.InterpModules = 0, 16, 888
		l.InterpID = 48
		l.TstateNext, l.TstateInterp, l.TstateFrame, l.CFrameCurrentFrame = 8, 16, 56, 8
		l.CFramePrevious = 16 // {uint8 use_tracing; current_frame; previous}
		l.TstateThreadID, l.TstateNativeThreadID = 152, 160
		l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameOwner = 48, 32, 56, 69
		l.FrameIsEntry, l.FrameLocalsplus, l.FrameSize = 68, 72, 72
		l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLinetable, l.CodeFirstLineno = 112, 120, 128, 136, 72
		l.CodeAdaptive, l.CodeLocalsplusNames, l.CodeLocalsplusKinds, l.CodeSize = 184, 96, 104, 144
		l.ASCIISize, l.CompactSize = 48, 72
		l.HeapCachedKeys = 872
		l.LongTag = 16
	case 12:
		l.Source = "table 3.12 (Include/internal/pycore_{frame,interp}.h @v3.12.1, checked live)"
		l.RuntimeInterpretersHead = 40
		l.InterpNext, l.InterpThreadsHead, l.InterpModules, l.InterpCevalGIL = 0, 72, 944, 384
		l.InterpID = 8
		l.TstateNext, l.TstateInterp, l.TstateFrame, l.CFrameCurrentFrame = 8, 16, 56, 0
		l.CFramePrevious = 8 // {current_frame; previous}
		l.TstateThreadID, l.TstateNativeThreadID = 136, 144
		l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameOwner = 8, 0, 56, 70
		l.FrameIsEntry, l.FrameLocalsplus, l.FrameSize = -1, 72, 72
		l.FrameOwnerSkip, l.FrameOwnerCStack = 3, 3
		l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLinetable, l.CodeFirstLineno = 112, 120, 128, 136, 68
		l.CodeAdaptive, l.CodeLocalsplusNames, l.CodeLocalsplusKinds, l.CodeSize = 192, 96, 104, 144
		l.CodeVersion = 92 // right before co_localsplusnames (Include/cpython/code.h @v3.12.1; DWARF of pyenv's 3.12.1)
		l.ASCIISize, l.CompactSize = 40, 56
		l.HeapCachedKeys = 880
	default:
		return nil, false
	}
	return l, true
}

// commonObjects are object-header offsets that have not moved in 3.10–3.15
// on x86_64 GIL builds (PyObject, PyVarObject, PyTypeObject slots).
func commonObjects() *Layout {
	return &Layout{
		ObType:             8,
		TypeName:           24,
		TypeBasicSize:      32,
		TypeFlags:          168,
		TypeDictOffset:     288,
		UnicodeLength:      16,
		UnicodeState:       32,
		BytesSize:          16,
		BytesData:          32,
		TupleSize:          16,
		TupleItems:         24,
		ListSize:           16,
		ListItems:          24,
		DictUsed:           16,
		DictKeys:           32,
		DictValues:         40,
		LongTag:            16,
		LongDigits:         24,
		FloatValue:         16,
		ModuleDict:         16,
		CellRef:            16,
		GILLastHolder:      8,
		GILLocked:          16,
		GILSwitchNumber:    24, // unsigned long after int locked (pycore_gil.h, 3.10–3.15)
		CFrameCurrentFrame: -1,
		FrameIsEntry:       -1,
		ManagedDictBack:    24, // MANAGED_DICT_OFFSET -3 words (pycore_object.h)
	}
}
