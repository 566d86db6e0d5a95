package perfevent

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The perf mmap ring: a metadata page, then a power-of-two data area written
// by the kernel at data_head and consumed by us up to data_tail. Records are
// {type u32, misc u16, size u16} headers followed by size-8 bytes; a record
// may wrap from the end of the data area to its start.
//
//	  data area (size 16)        tail=12        head=20 (mod 16 = 4)
//	  [r2 r2 r2 r2 . . . . . . . . r1 r1 r1 r1 ]
//	   ^0      ^4               ^12        ^15
//	  r1 starts at 12 and wraps: its last bytes sit at 0..3.

// Record types (include/uapi/linux/perf_event.h).
const (
	RecordMmap       = 1
	RecordLost       = 2
	RecordComm       = 3
	RecordExit       = 4
	RecordThrottle   = 5
	RecordUnthrottle = 6
	RecordFork       = 7
	RecordSample     = 9
	RecordMmap2      = 10
)

// RawRecord is one record as found in the ring; Body aliases a scratch
// buffer and is valid only during the callback.
type RawRecord struct {
	Type uint32
	Misc uint16
	Body []byte
}

var errBadRecord = errors.New("perf ring: record size smaller than its header")

// DrainRing decodes every whole record between tail and head (free-running
// byte counters) of data, calling fn for each, and returns the new tail.
// scratch is reused for records that wrap. Pure: no syscalls, so the
// wrap-around arithmetic is testable on byte slices.
func DrainRing(data []byte, tail, head uint64, scratch *[]byte, fn func(RawRecord)) (uint64, error) {
	size := uint64(len(data))
	if size == 0 || size&(size-1) != 0 {
		return tail, fmt.Errorf("perf ring: data size %d is not a power of two", size)
	}
	if head-tail > size {
		return head, fmt.Errorf("perf ring: head %d is %d bytes past tail %d, more than the ring holds", head, head-tail, tail)
	}
	for head-tail >= 8 {
		off := tail & (size - 1)
		var hdr [8]byte
		copyWrapped(hdr[:], data, off)
		typ := binary.LittleEndian.Uint32(hdr[0:])
		misc := binary.LittleEndian.Uint16(hdr[4:])
		rsize := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if rsize < 8 {
			return head, errBadRecord // the ring is corrupt: skip everything
		}
		if head-tail < rsize {
			break // partially written: wait for the rest
		}
		n := int(rsize - 8)
		body := off + 8
		var b []byte
		if body%size+uint64(n) <= size {
			s := body % size
			b = data[s : s+uint64(n)]
		} else {
			if cap(*scratch) < n {
				*scratch = make([]byte, n)
			}
			b = (*scratch)[:n]
			copyWrapped(b, data, body%size)
		}
		fn(RawRecord{Type: typ, Misc: misc, Body: b})
		tail += rsize
	}
	return tail, nil
}

func copyWrapped(dst, data []byte, off uint64) {
	n := copy(dst, data[off:])
	if n < len(dst) {
		copy(dst[n:], data)
	}
}

// Sample is the part of a PERF_RECORD_SAMPLE this package asks for:
// PERF_SAMPLE_TID | PERF_SAMPLE_TIME [| CALLCHAIN] [| REGS_USER] [| STACK_USER].
type Sample struct {
	Pid, Tid  uint32
	Time      uint64
	Callchain []uint64
	// RegsABI is PERF_SAMPLE_REGS_ABI_* (0: no user registers, e.g. a
	// kernel thread); Regs holds them by perf register number (RegIP, …).
	RegsABI uint64
	Regs    [NumPerfRegs]uint64
	// Stack is the copied user stack from the sampled rsp upward (its
	// dyn_size bytes); it aliases the record body.
	Stack []byte
}

// x86_64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const (
	RegAX, RegBX, RegCX, RegDX, RegSI, RegDI, RegBP, RegSP, RegIP = 0, 1, 2, 3, 4, 5, 6, 7, 8
	RegR8                                                         = 16
	NumPerfRegs                                                   = 24
	// RegsGeneral asks for the general registers and rip (no flags or
	// segment registers): what CFI rules can refer to.
	RegsGeneral uint64 = 0x1ff | 0xff<<RegR8
)

// SampleFormat says which optional fields a sample body holds, in the
// kernel's order.
type SampleFormat struct {
	Callchain bool
	RegsUser  uint64 // PERF_SAMPLE_REGS_USER mask; 0: not asked for
	StackUser bool
}

// DecodeSample parses a sample body of TID|TIME[|CALLCHAIN].
func DecodeSample(b []byte, callchain bool) (Sample, error) {
	return DecodeSampleFormat(b, SampleFormat{Callchain: callchain})
}

// DecodeSampleFormat parses a sample body laid out as f says. Pure: every
// length is checked against the body, so garbage yields an error, never a
// panic or an allocation larger than the body.
func DecodeSampleFormat(b []byte, f SampleFormat) (Sample, error) {
	var s Sample
	if len(b) < 16 {
		return s, fmt.Errorf("perf sample: %d bytes, need 16", len(b))
	}
	s.Pid = binary.LittleEndian.Uint32(b[0:])
	s.Tid = binary.LittleEndian.Uint32(b[4:])
	s.Time = binary.LittleEndian.Uint64(b[8:])
	off := 16
	u64 := func() (uint64, bool) {
		if len(b)-off < 8 {
			return 0, false
		}
		off += 8
		return binary.LittleEndian.Uint64(b[off-8:]), true
	}
	if f.Callchain {
		nr, ok := u64()
		if !ok {
			return Sample{}, fmt.Errorf("perf sample: no callchain length")
		}
		if nr > uint64(len(b)-off)/8 {
			return Sample{}, fmt.Errorf("perf sample: callchain of %d entries in %d bytes", nr, len(b)-off)
		}
		s.Callchain = make([]uint64, nr)
		for i := range s.Callchain {
			s.Callchain[i], _ = u64()
		}
	}
	if f.RegsUser != 0 {
		abi, ok := u64()
		if !ok {
			return Sample{}, fmt.Errorf("perf sample: no user register ABI at offset %d", off)
		}
		s.RegsABI = abi
		if abi != 0 {
			for r := 0; r < 64; r++ {
				if f.RegsUser&(1<<r) == 0 {
					continue
				}
				v, ok := u64()
				if !ok {
					return Sample{}, fmt.Errorf("perf sample: user register %d past the end (offset %d)", r, off)
				}
				if r < NumPerfRegs {
					s.Regs[r] = v
				}
			}
		}
	}
	if f.StackUser {
		size, ok := u64()
		if !ok {
			return Sample{}, fmt.Errorf("perf sample: no user stack size at offset %d", off)
		}
		if size > uint64(len(b)-off) {
			return Sample{}, fmt.Errorf("perf sample: user stack of %d bytes in %d", size, len(b)-off)
		}
		data := b[off : off+int(size)]
		off += int(size)
		if size != 0 {
			dyn, ok := u64()
			if !ok {
				return Sample{}, fmt.Errorf("perf sample: no user stack dyn_size at offset %d", off)
			}
			s.Stack = data[:min(dyn, size)]
		}
	}
	return s, nil
}

// DecodeLost returns the count of a PERF_RECORD_LOST.
func DecodeLost(b []byte) (uint64, error) {
	if len(b) < 16 {
		return 0, fmt.Errorf("perf lost record: %d bytes, need 16", len(b))
	}
	return binary.LittleEndian.Uint64(b[8:]), nil
}

// TaskEvent is a PERF_RECORD_FORK or _EXIT: {pid, ppid, tid, ptid, time}.
type TaskEvent struct {
	Pid, Ppid, Tid, Ptid uint32
	Time                 uint64
}

// DecodeTask parses FORK/EXIT bodies.
func DecodeTask(b []byte) (TaskEvent, error) {
	if len(b) < 24 {
		return TaskEvent{}, fmt.Errorf("perf fork/exit record: %d bytes, need 24", len(b))
	}
	return TaskEvent{
		Pid: binary.LittleEndian.Uint32(b[0:]), Ppid: binary.LittleEndian.Uint32(b[4:]),
		Tid: binary.LittleEndian.Uint32(b[8:]), Ptid: binary.LittleEndian.Uint32(b[12:]),
		Time: binary.LittleEndian.Uint64(b[16:]),
	}, nil
}
