package perfevent

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RecordSwitch is PERF_RECORD_SWITCH: the thread went off (Misc has
// SwitchOut) or came on a CPU.
const RecordSwitch = 14

// Misc bits of a RecordSwitch.
const (
	SwitchOut        = 0x2000 // PERF_RECORD_MISC_SWITCH_OUT
	SwitchOutPreempt = 0x4000 // PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: still runnable (run queue)
)

// SwitchTracer records every context switch of the threads it watches: one
// software dummy event per thread with context_switch set, sample_id_all
// (TID|TIME, CLOCK_MONOTONIC) and a ring of 16 data pages. Nothing wakes
// the reader: the owner drains the rings on its own timer, so a thread that
// switches thousands of times a second costs the kernel a ring write per
// switch and nothing else. No tracefs, no tracepoint ids.
type SwitchTracer struct {
	byTid   map[int]*ring
	scratch []byte
	pages   int
}

// NewSwitchTracer prepares an empty tracer; add threads with AddThread.
func NewSwitchTracer() *SwitchTracer {
	return &SwitchTracer{byTid: map[int]*ring{}, pages: 16}
}

// AddThread opens and enables the switch event on tid (no-op if watched).
func (s *SwitchTracer) AddThread(tid int) error {
	if _, ok := s.byTid[tid]; ok {
		return nil
	}
	page := unix.Getpagesize()
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_DUMMY,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME,
		Bits: unix.PerfBitDisabled | unix.PerfBitContextSwitch | unix.PerfBitSampleIDAll |
			unix.PerfBitUseClockID | unix.PerfBitWatermark,
		Clockid: unix.CLOCK_MONOTONIC,
		// Wake only when the ring is three quarters full: nobody waits on
		// it, the owner polls.
		Wakeup: uint32(page * s.pages * 3 / 4),
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("can't open context-switch event on tid %d: %w", tid, err)
	}
	mem, err := unix.Mmap(fd, 0, page*(1+s.pages), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("can't mmap the perf ring of tid %d: %w", tid, err)
	}
	r := &ring{fd: fd, tid: tid, mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])), data: mem[page:]}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		r.close()
		return fmt.Errorf("can't enable the context-switch event on tid %d: %w", tid, err)
	}
	s.byTid[tid] = r
	return nil
}

// Watching reports whether tid has an event.
func (s *SwitchTracer) Watching(tid int) bool { _, ok := s.byTid[tid]; return ok }

// Tids lists the watched threads.
func (s *SwitchTracer) Tids() []int {
	out := make([]int, 0, len(s.byTid))
	for t := range s.byTid {
		out = append(out, t)
	}
	return out
}

// Drain reads every record of tid's ring.
func (s *SwitchTracer) Drain(tid int, fn func(tid int, r RawRecord)) error {
	r := s.byTid[tid]
	if r == nil {
		return nil
	}
	return s.drainRing(r, fn)
}

// DrainAll reads every ring.
func (s *SwitchTracer) DrainAll(fn func(tid int, r RawRecord)) error {
	for _, r := range s.byTid {
		if err := s.drainRing(r, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *SwitchTracer) drainRing(r *ring, fn func(int, RawRecord)) error {
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := r.meta.Data_tail
	if head == tail {
		return nil
	}
	newTail, err := DrainRing(r.data, tail, head, &s.scratch, func(rec RawRecord) { fn(r.tid, rec) })
	atomic.StoreUint64(&r.meta.Data_tail, newTail)
	if err != nil {
		return fmt.Errorf("tid %d: %w", r.tid, err)
	}
	return nil
}

// Quiet reports whether tid's ring holds no record we have not read: after
// a drain that saw tid switch out, Quiet still true means it has not run
// since.
func (s *SwitchTracer) Quiet(tid int) bool {
	r := s.byTid[tid]
	if r == nil {
		return false
	}
	return atomic.LoadUint64(&r.meta.Data_head) == r.meta.Data_tail
}

// Remove closes tid's event (drain it first).
func (s *SwitchTracer) Remove(tid int) {
	if r := s.byTid[tid]; r != nil {
		r.close()
		delete(s.byTid, tid)
	}
}

// Close releases every event.
func (s *SwitchTracer) Close() {
	for _, r := range s.byTid {
		_ = unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		r.close()
	}
	s.byTid = map[int]*ring{}
}

// SampleID is the trailer sample_id_all appends to non-sample records for
// sample_type TID|TIME.
type SampleID struct {
	Pid, Tid uint32
	Time     uint64
}

// DecodeSwitch parses a PERF_RECORD_SWITCH body (only its sample_id for a
// per-thread event): out is set for a switch-out, preempt when the thread
// was still runnable.
func DecodeSwitch(rec RawRecord) (id SampleID, out, preempt bool, err error) {
	if len(rec.Body) < 16 {
		return id, false, false, fmt.Errorf("perf switch record: %d bytes, need 16", len(rec.Body))
	}
	b := rec.Body[len(rec.Body)-16:]
	id = SampleID{Pid: binary.LittleEndian.Uint32(b[0:]), Tid: binary.LittleEndian.Uint32(b[4:]), Time: binary.LittleEndian.Uint64(b[8:])}
	return id, rec.Misc&SwitchOut != 0, rec.Misc&SwitchOutPreempt != 0, nil
}
