package perfevent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SamplerConfig chooses the sampling event.
type SamplerConfig struct {
	Freq      int  // samples per second of the thread's CPU time (period 1e9/Freq ns of task-clock)
	Callchain bool // also ask for callchains
	// KernelCallchainOnly leaves the user part out of callchains (the
	// user stack is unwound from StackUser instead).
	KernelCallchainOnly bool
	// RegsUser asks for these user registers (RegsGeneral: all that CFI
	// uses) with each sample; StackUser for a copy of this many bytes of
	// the user stack from rsp up (a multiple of 8, at most MaxStackUser).
	RegsUser  uint64
	StackUser int
	DataPages int // ring data pages per thread (power of two; default 16)
	// WakeEvery is how many samples the kernel collects before waking us
	// (default 1). Each wake-up costs the target a cross-CPU wake and us a
	// context switch; at high rates waking once per few samples is cheaper
	// and, given the wake-up latency, loses nothing.
	WakeEvery int
	// Switches adds the thread's context-switch records to its ring.
	Switches bool
}

// MaxStackUser is the largest user stack copy asked for: a sample record,
// stack included, must fit the 16-bit record size.
const MaxStackUser = 60 * 1024

// Format is the layout of this sampler's sample bodies.
func (s *Sampler) Format() SampleFormat {
	return SampleFormat{Callchain: s.cfg.Callchain, RegsUser: s.cfg.RegsUser, StackUser: s.cfg.StackUser > 0}
}

// Sampler samples threads on CPU with the task-clock software event (it
// exists on every machine, PMU or not) and reads the records from one mmap
// ring per thread, woken through epoll.
type Sampler struct {
	cfg     SamplerConfig
	epfd    int
	rings   map[int]*ring // by fd
	byTid   map[int]*ring
	scratch []byte
	events  []unix.EpollEvent
}

type ring struct {
	fd   int
	tid  int
	mem  []byte
	meta *unix.PerfEventMmapPage
	data []byte
}

// NewSampler prepares an empty sampler; add threads with AddThread.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	if cfg.Freq <= 0 {
		return nil, errors.New("sampling frequency must be positive")
	}
	if cfg.StackUser < 0 || cfg.StackUser > MaxStackUser || cfg.StackUser%8 != 0 {
		return nil, fmt.Errorf("user stack size %d is not a multiple of 8 in 0..%d", cfg.StackUser, MaxStackUser)
	}
	if cfg.DataPages == 0 {
		cfg.DataPages = 16
		// Room for at least 4 wake-ups' worth of samples with their stacks.
		for need := 4 * max(1, cfg.WakeEvery) * (cfg.StackUser + 1024); cfg.DataPages*unix.Getpagesize() < need && cfg.DataPages < 1024; {
			cfg.DataPages *= 2
		}
	}
	if cfg.DataPages&(cfg.DataPages-1) != 0 {
		return nil, fmt.Errorf("ring pages %d is not a power of two", cfg.DataPages)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("can't create epoll: %w", err)
	}
	return &Sampler{cfg: cfg, epfd: epfd, rings: map[int]*ring{}, byTid: map[int]*ring{}, events: make([]unix.EpollEvent, 64)}, nil
}

// AddThread opens a sampling event on tid and starts it. Events are not
// inherited (the kernel refuses to mmap an inherited per-task event), so
// callers add threads created later themselves (Recorder rescans /proc).
func (s *Sampler) AddThread(tid int) error {
	if _, ok := s.byTid[tid]; ok {
		return nil
	}
	// task-clock counts nanoseconds on CPU, so a fixed period of 1e9/F ns
	// is exactly F samples per CPU-second; frequency mode would make the
	// kernel re-estimate the period and overshoot when the target is
	// descheduled often. Times are CLOCK_MONOTONIC, comparable with ours.
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_TASK_CLOCK,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      uint64(1e9 / s.cfg.Freq),
		Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME,
		Bits:        unix.PerfBitDisabled | unix.PerfBitUseClockID,
		Clockid:     unix.CLOCK_MONOTONIC,
		Wakeup:      uint32(max(1, s.cfg.WakeEvery)),
	}
	if s.cfg.Switches {
		// PERF_RECORD_SWITCH in the same ring, in order with the samples:
		// the reader learns that a thread went off CPU after a sample.
		attr.Bits |= unix.PerfBitContextSwitch
	}
	if s.cfg.Callchain {
		attr.Sample_type |= unix.PERF_SAMPLE_CALLCHAIN
		if s.cfg.KernelCallchainOnly {
			attr.Bits |= unix.PerfBitExcludeCallchainUser
		}
	}
	if s.cfg.RegsUser != 0 {
		attr.Sample_type |= unix.PERF_SAMPLE_REGS_USER
		attr.Sample_regs_user = s.cfg.RegsUser
	}
	if s.cfg.StackUser > 0 {
		attr.Sample_type |= unix.PERF_SAMPLE_STACK_USER
		attr.Sample_stack_user = uint32(s.cfg.StackUser)
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("can't open task-clock sampling event on tid %d: %w", tid, err)
	}
	page := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, page*(1+s.cfg.DataPages), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("can't mmap the perf ring of tid %d: %w", tid, err)
	}
	r := &ring{fd: fd, tid: tid, mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])), data: mem[page:]}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		r.close()
		return fmt.Errorf("can't watch the perf ring of tid %d: %w", tid, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		r.close()
		return fmt.Errorf("can't enable sampling on tid %d: %w", tid, err)
	}
	s.rings[fd] = r
	s.byTid[tid] = r
	return nil
}

// Threads is the number of threads with their own event.
func (s *Sampler) Threads() int { return len(s.rings) }

// Poll waits up to timeoutMs for data, then drains every ring that has
// records, calling fn for each. A thread whose event hung up (it exited) is
// closed after its last records are read.
func (s *Sampler) Poll(timeoutMs int, fn func(tid int, r RawRecord)) error {
	n, err := unix.EpollWait(s.epfd, s.events, timeoutMs)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("epoll_wait: %w", err)
	}
	if n <= 0 && s.cfg.WakeEvery > 1 {
		// Quiet for a while: collect what sits below the wake-up mark.
		return s.DrainAll(fn)
	}
	for i := 0; i < n; i++ {
		r := s.rings[int(s.events[i].Fd)]
		if r == nil {
			continue
		}
		if err := s.drain(r, fn); err != nil {
			return err
		}
		if s.events[i].Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			s.remove(r)
		}
	}
	return nil
}

// DrainAll reads whatever is left in every ring (at the end of a recording).
func (s *Sampler) DrainAll(fn func(tid int, r RawRecord)) error {
	for _, r := range s.rings {
		if err := s.drain(r, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sampler) drain(r *ring, fn func(int, RawRecord)) error {
	head := atomic.LoadUint64(&r.meta.Data_head) // acquire: records before head are complete
	tail := r.meta.Data_tail
	newTail, err := DrainRing(r.data, tail, head, &s.scratch, func(rec RawRecord) { fn(r.tid, rec) })
	atomic.StoreUint64(&r.meta.Data_tail, newTail) // release the space to the kernel
	if err != nil {
		return fmt.Errorf("tid %d: %w", r.tid, err)
	}
	return nil
}

func (s *Sampler) remove(r *ring) {
	_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
	delete(s.rings, r.fd)
	delete(s.byTid, r.tid)
	r.close()
}

func (r *ring) close() {
	_ = unix.Munmap(r.mem)
	_ = unix.Close(r.fd)
}

// Close stops and releases every event.
func (s *Sampler) Close() {
	for _, r := range s.rings {
		_ = unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		r.close()
	}
	s.rings, s.byTid = map[int]*ring{}, map[int]*ring{}
	_ = unix.Close(s.epfd)
}
