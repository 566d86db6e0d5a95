package pyframes

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pyobs/pyobs/internal/procfs"
)

// ErrNotPython: no mapped ELF file defines _PyRuntime.
var ErrNotPython = errors.New("not a Python process: no mapped file defines _PyRuntime")

// Mapping is one line of /proc/PID/maps (procfs owns the parser).
type Mapping = procfs.Mapping

// RuntimeInfo is what the detector found: the ELF that holds the interpreter
// and the target addresses of the symbols the walker uses.
type RuntimeInfo struct {
	Binary  string // path as the target maps it
	Bias    uint64 // load bias: target address = symbol value + Bias
	Runtime uint64 // &_PyRuntime in the target
	Syms    map[string]uint64
	ELFType elf.Type
}

// Symbols the walker resolves (all exported by every CPython 3.10+ build).
var wantSyms = []string{
	"_PyRuntime", "Py_Version", "Py_GetVersion", "PyCode_Type", "PyFrame_Type", "PyUnicode_Type", "PyBytes_Type",
	"PyLong_Type", "PyBool_Type", "PyFloat_Type", "PyTuple_Type", "PyList_Type", "PyDict_Type",
	"_Py_NoneStruct", "_Py_TrueStruct", "PyModule_Type", "PySet_Type", "PyCell_Type",
	"_PyThreadState_GetCurrent", // 3.12+: where a thread's attached state is (AttachedTLS)
}

// ReadMaps returns pid's file-backed mappings.
func ReadMaps(pid int) ([]Mapping, error) {
	all, err := procfs.Default().Maps(pid)
	if err != nil {
		return nil, err
	}
	var out []Mapping
	for _, m := range all {
		if m.FileBacked() {
			out = append(out, m)
		}
	}
	return out, nil
}

// candidates orders mapped files: names containing "python" first (libpython,
// python3.X), then the others (an embedding binary), each once.
func candidates(maps []Mapping) []string {
	seen := map[string]bool{}
	var py, other []string
	for _, m := range maps {
		if seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		base := filepath.Base(m.Path)
		if strings.Contains(base, "python") {
			py = append(py, m.Path)
		} else {
			other = append(other, m.Path)
		}
	}
	return append(py, other...)
}

// openMapped opens a mapped file as the target sees it (its root, its mount
// namespace); falls back to map_files when the path is gone.
func openMapped(pid int, path string, maps []Mapping) (*elf.File, error) {
	p := strings.TrimSuffix(path, " (deleted)")
	fs := procfs.Default()
	f, err := elf.Open(fs.RootPath(pid, p))
	if err == nil {
		return f, nil
	}
	for _, m := range maps {
		if m.Path == path {
			if f2, err2 := elf.Open(fs.MapFilePath(pid, m.Start, m.End)); err2 == nil {
				return f2, nil
			}
		}
	}
	return nil, err
}

// FindRuntime locates _PyRuntime in pid by ELF symbols (or the .PyRuntime
// section), never trusting /proc/PID/exe (which can be the dynamic loader).
func FindRuntime(pid int, maps []Mapping) (*RuntimeInfo, error) {
	var firstErr error
	for _, path := range candidates(maps) {
		f, err := openMapped(pid, path, maps)
		if err != nil {
			continue // not ELF, or not readable: not ours
		}
		info, err := runtimeFromELF(f, path, maps)
		f.Close()
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, errNoRuntimeHere) && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	// No _PyRuntime, but a python2.7 / python3.6 / libpython… is mapped: an
	// interpreter older than pyobs reads (_PyRuntime is 3.7+). Name it. (A
	// python3.12 without it is a shared-libpython build whose library the
	// loader has not mapped yet: not Python yet, not unsupported.)
	for _, path := range candidates(maps) {
		if v, ok := versionFromName(path); ok && (v.Major < 3 || v.Minor < 7) {
			return nil, fmt.Errorf("pid %d (%s): %w", pid, filepath.Base(path), &UnsupportedVersionError{Version: v, Why: "it has no _PyRuntime (3.7+)"})
		}
	}
	return nil, ErrNotPython
}

var errNoRuntimeHere = errors.New("no _PyRuntime in this file")

// collectSyms adds the wanted names of ss that f defines to syms (the
// first definition of each).
func collectSyms(ss []elf.Symbol, want map[string]bool, syms map[string]uint64) {
	for _, s := range ss {
		if want[s.Name] && s.Value != 0 && s.Section != elf.SHN_UNDEF {
			if _, ok := syms[s.Name]; !ok {
				syms[s.Name] = s.Value
			}
		}
	}
}

// exportedSyms looks the wanted names up in f's dynamic symbols, and
// _PyRuntime in the .PyRuntime section when it is not exported: a file
// holds the interpreter if and only if the result has _PyRuntime.
func exportedSyms(f *elf.File, want map[string]bool) map[string]uint64 {
	syms := map[string]uint64{}
	if !dynSyms(f, want, syms) {
		if ds, err := f.DynamicSymbols(); err == nil {
			collectSyms(ds, want, syms)
		}
	}
	if _, ok := syms["_PyRuntime"]; !ok {
		if sec := f.Section(".PyRuntime"); sec != nil && sec.Addr != 0 {
			syms["_PyRuntime"] = sec.Addr
		}
	}
	return syms
}

func runtimeFromELF(f *elf.File, path string, maps []Mapping) (*RuntimeInfo, error) {
	want := map[string]bool{}
	for _, s := range wantSyms {
		want[s] = true
	}
	syms := exportedSyms(f, want)
	if _, ok := syms["_PyRuntime"]; !ok {
		return nil, errNoRuntimeHere
	}
	if len(syms) < len(wantSyms)-3 { // some (e.g. PyFrame_Type, _PyThreadState_GetCurrent) are optional; a stripped dynsym is not
		if ss, err := f.Symbols(); err == nil {
			collectSyms(ss, want, syms)
		}
	}
	bias, err := loadBias(f, path, maps)
	if err != nil {
		return nil, err
	}
	info := &RuntimeInfo{Binary: path, Bias: bias, Syms: map[string]uint64{}, ELFType: f.Type}
	for k, v := range syms {
		info.Syms[k] = v + bias
	}
	info.Runtime = info.Syms["_PyRuntime"]
	return info, nil
}

// dynSyms looks the wanted names up in a 64-bit f's dynamic symbol table
// in place, without decoding the whole table into elf.Symbols (libpython
// exports ~1,800 names: that decoding was ~4 % of a dump's CPU, its
// strings most of the allocations). False: no such table, or not 64-bit
// (the caller decodes it the usual way).
func dynSyms(f *elf.File, want map[string]bool, syms map[string]uint64) bool {
	return tableSyms(f, elf.SHT_DYNSYM, want, syms)
}

// tableSyms is dynSyms over the symbol table of type typ (SHT_DYNSYM,
// SHT_SYMTAB).
func tableSyms(f *elf.File, typ elf.SectionType, want map[string]bool, syms map[string]uint64) bool {
	const entry = 24 // Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64
	sec := f.SectionByType(typ)
	if f.Class != elf.ELFCLASS64 || sec == nil || int(sec.Link) >= len(f.Sections) {
		return false
	}
	tab, err := sec.Data()
	if err != nil {
		return false
	}
	names, err := f.Sections[sec.Link].Data()
	if err != nil {
		return false
	}
	bo := f.ByteOrder
	for off := entry; off+entry <= len(tab); off += entry { // entry 0 is the null symbol
		value := bo.Uint64(tab[off+8:])
		if value == 0 || elf.SectionIndex(bo.Uint16(tab[off+6:])) == elf.SHN_UNDEF {
			continue
		}
		at := int(bo.Uint32(tab[off:]))
		if at >= len(names) {
			continue
		}
		end := bytes.IndexByte(names[at:], 0)
		if end < 0 {
			continue
		}
		if name := names[at : at+end]; want[string(name)] {
			if _, ok := syms[string(name)]; !ok {
				syms[string(name)] = value
			}
		}
	}
	return true
}

// loadBias: for the first PT_LOAD segment, the mapping of its page-aligned
// file offset gives bias = map.start - (vaddr aligned down). EXEC files have
// bias 0 by construction; PIE and shared objects get their real base.
func loadBias(f *elf.File, path string, maps []Mapping) (uint64, error) {
	var loads []*elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p)
		}
	}
	if len(loads) == 0 {
		return 0, fmt.Errorf("%s: no PT_LOAD segment", path)
	}
	sort.Slice(loads, func(i, j int) bool { return loads[i].Off < loads[j].Off })
	const page = 4096
	seg := loads[0]
	off := seg.Off &^ (page - 1)
	for _, m := range maps {
		if m.Path == path && m.Offset == off {
			return m.Start - (seg.Vaddr &^ (page - 1)), nil
		}
	}
	return 0, fmt.Errorf("%s: no mapping at file offset 0x%x", path, off)
}

var versionInName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`python(\d)\.(\d+)`) })

// versionFromName reads "3.10" out of libpython3.10.so / python3.10.
func versionFromName(path string) (Version, bool) {
	m := versionInName().FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return Version{}, false
	}
	maj, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	return Version{Major: maj, Minor: min, Micro: -1}, true
}

var pyVersionString = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:(?:a|b|rc)\d+)?\+?$`)
})

// versionFromGetVersion reads the full version of a build without
// Py_Version (3.10) from the PY_VERSION string ("3.10.13") that
// Py_GetVersion() formats into sys.version: its code loads that literal's
// address with a RIP-relative lea (x86-64), so each such lea's target in
// its first bytes is read and kept if it is a whole version string. The
// literal cannot be found by scanning .rodata alone: the linker merges it
// into the tail of longer strings (pyenv's prefix ".../versions/3.10.13").
// False when no single version string is found (another compiler's code,
// another architecture): the caller keeps the file name's 3.minor.
func versionFromGetVersion(mem Memory, info *RuntimeInfo) (Version, bool) {
	fn, ok := info.Syms["Py_GetVersion"]
	if !ok {
		return Version{}, false
	}
	code := make([]byte, 96) // pyenv 3.10.13: the lea is at byte 35
	if err := mem.Read(fn, code); err != nil {
		return Version{}, false
	}
	var found []Version
	for i := 0; i+7 <= len(code); i++ {
		// REX.W (0x48, or 0x4c for r8–r15) 8d /r with mod 00, r/m 101:
		// lea disp32(%rip), reg; the address is that of the next instruction plus disp32.
		if code[i]&0xfb != 0x48 || code[i+1] != 0x8d || code[i+2]&0xc7 != 0x05 {
			continue
		}
		at := fn + uint64(i+7) + uint64(int64(int32(le32(code, uint64(i+3)))))
		buf := make([]byte, 16) // "3.10.13rc1+" and its NUL fit
		if err := mem.Read(at, buf); err != nil {
			continue
		}
		end := bytes.IndexByte(buf, 0)
		if end < 0 {
			continue
		}
		m := pyVersionString().FindStringSubmatch(string(buf[:end]))
		if m == nil {
			continue
		}
		maj, _ := strconv.Atoi(m[1])
		min, _ := strconv.Atoi(m[2])
		mic, _ := strconv.Atoi(m[3])
		v := Version{Major: maj, Minor: min, Micro: mic}
		if len(found) == 0 || found[0] != v {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		return Version{}, false
	}
	return found[0], true
}
