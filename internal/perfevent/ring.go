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
// PERF_SAMPLE_TID | PERF_SAMPLE_TIME [| PERF_SAMPLE_CALLCHAIN].
type Sample struct {
	Pid, Tid  uint32
	Time      uint64
	Callchain []uint64 // aliases the record body
}

// DecodeSample parses a sample body for the given sample_type bits.
func DecodeSample(b []byte, callchain bool) (Sample, error) {
	var s Sample
	if len(b) < 16 {
		return s, fmt.Errorf("perf sample: %d bytes, need 16", len(b))
	}
	s.Pid = binary.LittleEndian.Uint32(b[0:])
	s.Tid = binary.LittleEndian.Uint32(b[4:])
	s.Time = binary.LittleEndian.Uint64(b[8:])
	if callchain {
		if len(b) < 24 {
			return Sample{}, fmt.Errorf("perf sample: no callchain length")
		}
		nr := binary.LittleEndian.Uint64(b[16:])
		if nr > uint64(len(b)-24)/8 {
			return Sample{}, fmt.Errorf("perf sample: callchain of %d entries in %d bytes", nr, len(b)-24)
		}
		s.Callchain = make([]uint64, nr)
		for i := range s.Callchain {
			s.Callchain[i] = binary.LittleEndian.Uint64(b[24+8*i:])
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
