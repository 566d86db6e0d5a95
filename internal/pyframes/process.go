package pyframes

import (
	"errors"
	"fmt"
)

// Process is an attached interpreter: its layout, where its runtime lives,
// and the caches that make repeated walks cheap.
type Process struct {
	Pid     int
	Info    *RuntimeInfo
	Layout  *Layout
	objs    objReader
	codes   map[uint64]*codeInfo
	NoCache bool // benchmarks: re-read every code object

	codeSerial uint64

	// ThreadNames' threading._active dict of each interpreter, and when
	// it was looked up (names.go).
	actives map[uint64]activeDict

	Stats Stats

	scratch scratch // reused by every walk: a Process is not for concurrent use
}

// scratch buffers of the hot path (a sample's stack read allocates only its result).
type scratch struct {
	allWindow bool // the last walk read every frame from the window
	truncated bool // the last walk stopped at MaxDepth (no cycle seen)
	out       []Frame
	tsHdr     []byte
	re        [16 + 256]byte // recheck: frame field, cframe field, top frame header
	reSegs    []Seg
	window    []byte
	winSegs   []Seg
	raw       []rawFrame
	codes     []uint64
	infos     []*codeInfo
	segs      []Seg
	idx       []int
	codeBuf   []byte
	frame     []byte
	miss      []byte // readMissWindow's copy (apart from frame: both live in one walk)
}

// Stats counts what the walker did, for the perturbation report.
type Stats struct {
	CodeHits, CodeMisses uint64
	TornRetries          uint64 // walks redone because the stack changed under us
	Inconsistent         uint64 // threads reported after the retries ran out
	Snapshots            uint64 // stacks accepted from one read although the thread moved on
}

// Open attaches to a live pid: finds the interpreter, reads its version and
// layout. It stops nothing and writes nothing.
func Open(pid int) (*Process, error) {
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	info, err := FindRuntime(pid, maps)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return New(NewProcessMemory(pid), pid, info)
}

// New builds a Process over any Memory (a snapshot in tests).
func New(mem Memory, pid int, info *RuntimeInfo) (*Process, error) {
	l, err := detectLayout(mem, info)
	if err != nil {
		return nil, fmt.Errorf("pid %d (%s): %w", pid, info.Binary, err)
	}
	p := &Process{Pid: pid, Info: info, Layout: l, codes: map[uint64]*codeInfo{}}
	p.objs = objReader{reader: reader{mem: mem}, l: l, types: typeAddrs{
		code: info.Syms["PyCode_Type"], frame: info.Syms["PyFrame_Type"], unicode: info.Syms["PyUnicode_Type"],
		bytes: info.Syms["PyBytes_Type"], long: info.Syms["PyLong_Type"], bool_: info.Syms["PyBool_Type"],
		float: info.Syms["PyFloat_Type"], tuple: info.Syms["PyTuple_Type"], list: info.Syms["PyList_Type"],
		dict: info.Syms["PyDict_Type"], none: info.Syms["_Py_NoneStruct"], trueObj: info.Syms["_Py_TrueStruct"],
		module: info.Syms["PyModule_Type"],
	}}
	if p.objs.types.code == 0 {
		return nil, fmt.Errorf("pid %d (%s): PyCode_Type not found: can't validate code objects", pid, info.Binary)
	}
	return p, nil
}

// detectLayout reads the version: the debug-offsets table (3.13+), else the
// Py_Version symbol (3.11+), else the file name (3.10), its micro from
// Py_GetVersion's PY_VERSION string when that can be found.
func detectLayout(mem Memory, info *RuntimeInfo) (*Layout, error) {
	r := reader{mem: mem}
	head := make([]byte, 16)
	if err := mem.Read(info.Runtime, head); err != nil {
		return nil, fmt.Errorf("can't read _PyRuntime: %w", err)
	}
	if string(head[:8]) == string(DebugCookie) {
		v := VersionHex(le64(head, 8))
		n := DebugTableSize(v.Minor)
		if n == 0 {
			return nil, &UnsupportedVersionError{Version: v}
		}
		tbl := make([]byte, n)
		if err := mem.Read(info.Runtime, tbl); err != nil {
			return nil, fmt.Errorf("can't read debug offsets: %w", err)
		}
		d, err := ParseDebugOffsets(tbl)
		if err != nil {
			return nil, err
		}
		return layoutFromDebugOffsets(d)
	}
	var v Version
	if a, ok := info.Syms["Py_Version"]; ok {
		x, err := r.u32(a)
		if err != nil {
			return nil, fmt.Errorf("can't read Py_Version: %w", err)
		}
		v = VersionHex(uint64(x))
	} else if nv, ok := versionFromName(info.Binary); ok {
		v = nv // 3.minor only: the micro, when found, from Py_GetVersion's PY_VERSION literal
		if full, ok := versionFromGetVersion(mem, info); ok && full.Major == v.Major && full.Minor == v.Minor {
			v = full
		}
	} else {
		return nil, errors.New("can't tell the Python version: no debug offsets, no Py_Version, no version in the file name")
	}
	if v.Major != 3 || v.Minor < MinMinor || v.Minor > MaxMinor {
		return nil, &UnsupportedVersionError{Version: v}
	}
	if v.Minor >= 13 {
		return nil, fmt.Errorf("python %s without a debug-offsets table at _PyRuntime: refusing to guess its layout", v)
	}
	l, _ := staticLayout(v)
	return l, nil
}

// Version of the attached interpreter.
func (p *Process) Version() Version { return p.Layout.Version }
