package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory is the walker's only view of the target: a reader of its address
// space. The live implementation is ProcessMemory; tests use Snapshot.
// Read fills all of p or returns an error; a short read is an error, never a
// zero-filled buffer.
type Memory interface {
	Read(addr uint64, p []byte) error
}

// MemError says which read failed: pid, address, and how much arrived.
type MemError struct {
	Pid  int
	Addr uint64
	Want int
	Got  int
	Err  error
}

func (e *MemError) Error() string {
	return fmt.Sprintf("can't read pid %d memory at 0x%x: got %d of %d bytes: %v", e.Pid, e.Addr, e.Got, e.Want, e.Err)
}

func (e *MemError) Unwrap() error { return e.Err }

// ErrUnmapped is the cause when no mapping covers an address.
var ErrUnmapped = errors.New("address not mapped")

// Snapshot is a Memory made of recorded regions, for tests and fuzzing.
type Snapshot struct {
	Pid     int
	regions []region
}

type region struct {
	addr uint64
	data []byte
}

// Add records data at addr. Later regions win where they overlap.
func (s *Snapshot) Add(addr uint64, data []byte) {
	s.regions = append(s.regions, region{addr, append([]byte(nil), data...)})
}

// Read copies from the one region that holds the whole range.
func (s *Snapshot) Read(addr uint64, p []byte) error {
	for i := len(s.regions) - 1; i >= 0; i-- {
		r := s.regions[i]
		if addr >= r.addr && addr-r.addr <= uint64(len(r.data)) && uint64(len(p)) <= uint64(len(r.data))-(addr-r.addr) {
			copy(p, r.data[addr-r.addr:])
			return nil
		}
	}
	return &MemError{Pid: s.Pid, Addr: addr, Want: len(p), Err: ErrUnmapped}
}

// reader wraps a Memory with typed little-endian helpers (x86_64 only).
type reader struct {
	mem Memory
	buf [8]byte
}

func (r *reader) u64(addr uint64) (uint64, error) {
	if err := r.mem.Read(addr, r.buf[:8]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(r.buf[:8]), nil
}

func (r *reader) u32(addr uint64) (uint32, error) {
	if err := r.mem.Read(addr, r.buf[:4]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(r.buf[:4]), nil
}

func (r *reader) bytes(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if err := r.mem.Read(addr, b); err != nil {
		return nil, err
	}
	return b, nil
}

func le64(b []byte, off uint64) uint64 {
	if off > uint64(len(b)) || uint64(len(b))-off < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

func le32(b []byte, off uint64) uint32 {
	if off > uint64(len(b)) || uint64(len(b))-off < 4 {
		return 0
	}
	return binary.LittleEndian.Uint32(b[off:])
}

// Seg is one piece of a vectored read.
type Seg struct {
	Addr uint64
	Buf  []byte
}

// VectorMemory reads several pieces in one go (one process_vm_readv). It
// returns how many leading segments were read whole; reading stops at the
// first one that is not mapped.
type VectorMemory interface {
	ReadV(segs []Seg) int
}

// ReadV reads each segment in order, stopping at the first failure.
func (s *Snapshot) ReadV(segs []Seg) int {
	for i, g := range segs {
		if s.Read(g.Addr, g.Buf) != nil {
			return i
		}
	}
	return len(segs)
}

// readV uses the memory's vectored read when it has one.
func readV(m Memory, segs []Seg) int {
	if v, ok := m.(VectorMemory); ok {
		return v.ReadV(segs)
	}
	for i, g := range segs {
		if m.Read(g.Addr, g.Buf) != nil {
			return i
		}
	}
	return len(segs)
}
