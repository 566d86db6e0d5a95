package pyframes

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// AttachedTLS finds where, relative to a thread's fsbase, 3.12+ keeps the
// thread state the thread is attached to right now (the static TLS
// variable _Py_tss_tstate: NULL while the thread is detached). It differs
// from the thread's bound state (TLSOffsets: the one it was born with)
// while the thread runs a sub-interpreter's code: the bound one then holds
// the frames that called into the sub-interpreter.
//
// It decodes the exported accessor _PyThreadState_GetCurrent: `mov
// %fs:OFF,%rax` in a static build (local-exec), `mov GOT(%rip),%rax; mov
// %fs:(%rax),%rax` (initial-exec: the GOT holds OFF), or `lea GOT(%rip),
// %rdi; call __tls_get_addr` (general-dynamic, a shared libpython: the GOT
// holds the module id and the variable's offset in the module's block,
// found per thread through glibc's DTV; a libpython loaded at start-up
// has its block in static TLS, the same offset from every thread's
// fsbase, which every thread read must agree on). ok is false before
// 3.12, for an accessor of another shape, or when the threads disagree
// (a dlopen'ed libpython: per-thread blocks).
func (p *Process) AttachedTLS() (off int64, ok bool, err error) {
	fn := p.Info.Syms["_PyThreadState_GetCurrent"]
	if p.Layout.Version.Minor < 12 || fn == 0 {
		return 0, false, nil
	}
	code := make([]byte, 32)
	if err := p.objs.mem.Read(fn, code); err != nil {
		return 0, false, fmt.Errorf("pid %d: can't read _PyThreadState_GetCurrent at 0x%x: %w", p.Pid, fn, err)
	}
	k, at := decodeTLSAccessor(code)
	var got uint64
	if k == tlsInitialExec || k == tlsGeneralDynamic {
		got = uint64(int64(fn) + int64(at))
	}
	switch k {
	case tlsLocalExec:
		off = int64(at)
	case tlsInitialExec:
		v, err := p.objs.u64(got)
		if err != nil {
			return 0, false, fmt.Errorf("pid %d: can't read the TLS offset of _Py_tss_tstate at 0x%x: %w", p.Pid, got, err)
		}
		off = int64(v)
	case tlsGeneralDynamic:
		return p.dtvOffset(got)
	default:
		return 0, false, nil
	}
	return off, p.attachedOffsetFits(off), nil
}

// dtvOffset is AttachedTLS for a general-dynamic access through the GOT
// pair at got: {module id, offset in the module's TLS block}.
func (p *Process) dtvOffset(got uint64) (int64, bool, error) {
	mod, err := p.objs.u64(got)
	if err != nil {
		return 0, false, fmt.Errorf("pid %d: can't read the TLS module id at 0x%x: %w", p.Pid, got, err)
	}
	dtpoff, err := p.objs.u64(got + 8)
	if err != nil {
		return 0, false, fmt.Errorf("pid %d: can't read the TLS offset at 0x%x: %w", p.Pid, got+8, err)
	}
	if mod == 0 || mod > 1<<16 {
		return 0, false, nil // not relocated yet, or not glibc's numbering
	}
	refs, err := p.ThreadRefs()
	if err != nil {
		return 0, false, err
	}
	var off int64
	n := 0
	for _, r := range refs {
		fs := r.ThreadID
		if fs == 0 {
			continue
		}
		// glibc: the DTV pointer is the second word of the TCB; entries
		// are {val, to_free}, 16 bytes, entry 0 the generation.
		dtv, err := p.objs.u64(fs + 8)
		if err != nil || dtv == 0 {
			continue
		}
		block, err := p.objs.u64(dtv + 16*mod)
		if err != nil || block == 0 || block == ^uint64(0) {
			continue // not allocated in this thread (yet)
		}
		o := int64(block + dtpoff - fs)
		if n > 0 && o != off {
			return 0, false, nil // per-thread blocks: no fixed offset
		}
		off = o
		n++
	}
	if n == 0 || !p.attachedOffsetFits(off) {
		return 0, false, nil
	}
	return off, true, nil
}

// attachedOffsetFits checks off against every bound thread: what it points
// at is NULL (detached) or a thread state of that very thread.
func (p *Process) attachedOffsetFits(off int64) bool {
	if off < -tlsWindow*16 || off > tlsWindow*16 {
		return false
	}
	refs, err := p.ThreadRefs()
	if err != nil {
		return false
	}
	seen := 0
	for _, r := range refs {
		if r.ThreadID == 0 {
			continue
		}
		v, err := p.objs.u64(uint64(int64(r.ThreadID) + off))
		if err != nil {
			continue // a thread that just ended
		}
		seen++
		if v == 0 {
			continue
		}
		id, err := p.objs.u64(v + p.Layout.TstateThreadID)
		if err != nil || id != r.ThreadID {
			return false
		}
	}
	return seen > 0
}

type tlsKind int

const (
	tlsUnknown tlsKind = iota
	tlsLocalExec
	tlsInitialExec
	tlsGeneralDynamic
)

// decodeTLSAccessor reads the code of a function that returns a TLS
// variable (x86_64): for local-exec, at is the offset from fsbase; for
// initial-exec and general-dynamic, the GOT entry's address relative to
// the function's start.
func decodeTLSAccessor(code []byte) (tlsKind, int32) {
	i := 0
	for i < 8 {
		switch {
		case bytes.HasPrefix(code[i:], []byte{0xf3, 0x0f, 0x1e, 0xfa}): // endbr64
			i += 4
		case bytes.HasPrefix(code[i:], []byte{0x48, 0x83, 0xec}) && len(code) > i+3: // sub $imm8,%rsp
			i += 4
		default:
			goto body
		}
	}
body:
	rest := code[i:]
	d32 := func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }
	switch {
	case len(rest) >= 9 && bytes.HasPrefix(rest, []byte{0x64, 0x48, 0x8b, 0x04, 0x25}): // mov %fs:d32,%rax
		return tlsLocalExec, d32(rest[5:])
	case len(rest) >= 11 && bytes.HasPrefix(rest, []byte{0x48, 0x8b, 0x05}) && // mov r32(%rip),%rax
		bytes.HasPrefix(rest[7:], []byte{0x64, 0x48, 0x8b, 0x00}): // mov %fs:(%rax),%rax
		return tlsInitialExec, int32(i+7) + d32(rest[3:])
	case len(rest) >= 12 && bytes.HasPrefix(rest, []byte{0x66, 0x48, 0x8d, 0x3d}) && // data16 lea r32(%rip),%rdi
		bytes.HasPrefix(rest[8:], []byte{0x66, 0x66, 0x48}): // data16 data16 rex.W call __tls_get_addr
		return tlsGeneralDynamic, int32(i+8) + d32(rest[4:])
	}
	return tlsUnknown, 0
}
