package pyframes

import (
	"debug/elf"
	"fmt"
	"path/filepath"
)

// Code-object serials (3.12/3.13). Each code object gets co_version from a
// counter that only grows (Objects/codeobject.c init_code: the global
// _Py_next_func_version on 3.12, interp->func_state.next_version on 3.13),
// so a code object freed and its address reused by another is told apart
// by its co_version, where its name, file and line-table pointers may all
// come back the same (a module compiled in a loop gets its strings at the
// addresses the last one freed). The counter itself is a generation: a
// code object that sits at an address now and has a co_version below the
// counter's value at an earlier instant was there at that instant.
//
// Neither is in _Py_DebugOffsets. co_version is the field right before
// co_localsplusnames in 3.12's and 3.13's PyCodeObject (Include/cpython/
// code.h at v3.12.1 and v3.13.0); func_state's offset in PyInterpreterState
// was read from the DWARF of the builds below, and is used only for a
// build whose PyInterpreterState has the size it had there.

// nextCodeVersion313 maps sizeof(PyInterpreterState), as the debug offsets
// publish it, to offsetof(PyInterpreterState, func_state.next_version).
var nextCodeVersion313 = []struct {
	freeThreaded bool
	interpSize   uint64
	off          uint64
	source       string
}{
	{false, 194968, 17000, "pyenv 3.13.0 (DWARF)"},
	{true, 215616, 20092, "3.13.15t built from Debian's source (DWARF)"},
}

func codeVersion313(l *Layout, f map[string]uint64) {
	if l.CodeLocalsplusNames >= 4 {
		l.CodeVersion = l.CodeLocalsplusNames - 4
		l.CodeSize = max(l.CodeSize, l.CodeVersion+4)
	}
	size := f["interpreter_state.size"]
	for _, e := range nextCodeVersion313 {
		if e.freeThreaded == l.FreeThreaded && e.interpSize == size {
			l.InterpNextCodeVersion = e.off
		}
	}
}

// nextCodeVersionAddr is where 3.12/3.13 keep the next co_version in the
// target (0, and why, when this build does not say).
func (p *Process) nextCodeVersionAddr(interp uint64) (uint64, string) {
	var addr uint64
	switch {
	case interp == 0:
		return 0, "no interpreter yet"
	case p.Layout.CodeVersion == 0:
		return 0, fmt.Sprintf("python %s: no co_version offset known", p.Layout.Version)
	case p.Layout.Version.Minor == 13:
		if p.Layout.InterpNextCodeVersion == 0 {
			return 0, fmt.Sprintf("python %s: a PyInterpreterState of a size pyobs has no func_state offset for", p.Layout.Version)
		}
		addr = interp + p.Layout.InterpNextCodeVersion
	default:
		a, err := p.localSymbol("_Py_next_func_version")
		if err != nil {
			return 0, err.Error()
		}
		addr = a
	}
	// Readable is all that is checked: the offset is the build's (3.13: its
	// PyInterpreterState's size matched; 3.12: its own symbol), and a
	// program attached while it starts (a held command) has a small count,
	// or 0 before its interpreter is initialised (samples of generation 0
	// are checked by age).
	b := make([]byte, 4)
	if err := p.objs.mem.Read(addr, b); err != nil {
		return 0, fmt.Sprintf("can't read the next co_version at 0x%x: %v", addr, err)
	}
	return addr, ""
}

// localSymbol is the target address of a symbol only the static symbol
// table (.symtab) names: absent from a stripped build.
func (p *Process) localSymbol(name string) (uint64, error) {
	maps, err := ReadMaps(p.Pid)
	if err != nil {
		return 0, err
	}
	f, err := openMapped(p.Pid, p.Info.Binary, maps)
	if err != nil {
		return 0, fmt.Errorf("pid %d: can't open %s for its symbol table: %w", p.Pid, p.Info.Binary, err)
	}
	defer f.Close()
	syms := map[string]uint64{}
	if !tableSyms(f, elf.SHT_SYMTAB, map[string]bool{name: true}, syms) {
		return 0, fmt.Errorf("%s has no symbol table (.symtab: stripped), so %s can't be found", filepath.Base(p.Info.Binary), name)
	}
	v, ok := syms[name]
	if !ok {
		return 0, fmt.Errorf("%s's symbol table has no %s", filepath.Base(p.Info.Binary), name)
	}
	return v + p.Info.Bias, nil
}

// CodeCounter reads the u32 counter at addr (KernelLayout.CodeGenerationAddr
// of a 3.12/3.13 build) now.
func (p *Process) CodeCounter(addr uint64) (uint64, error) {
	b := make([]byte, 4)
	if err := p.objs.mem.Read(addr, b); err != nil {
		return 0, fmt.Errorf("pid %d: next co_version at 0x%x: %w", p.Pid, addr, err)
	}
	return uint64(le32(b, 0)), nil
}
