package perfevent

import (
	"errors"
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
)

// ErrDenied is wrapped by the error Open returns when perf_event_open was
// refused for every event (perf_event_paranoid, CAP_PERFMON, seccomp).
var ErrDenied = errors.New("perf_event_open denied")

// member is one planned event: where it sits and how it opens.
type member struct {
	info EventInfo
	ev   Event
}

// plan is a group as it turned out to open on the first thread: a group
// whose leader is unsupported is split into single events.
type plan struct {
	members []int // indexes into Set.events
}

type openGroup struct {
	plan   int
	leader int
	fds    []int
	ids    map[uint64]int // id → event index
}

// Set is the counters of one process: per thread, the planned groups.
type Set struct {
	Pid    int
	Denied string // which gate refused, when one did (events then unsupported)
	Notes  []string

	events  []member
	plans   []plan
	threads map[int][]openGroup
	exclK   bool
}

// Events lists the events in order with their support.
func (s *Set) Events() []EventInfo {
	out := make([]EventInfo, len(s.events))
	for i, m := range s.events {
		out[i] = m.info
	}
	return out
}

// Open counts groups on each tid of pid, with inherit (threads they create
// later are counted into their creator's counters). It fails only when no
// event at all could be opened for a reason other than "not supported".
func Open(pid int, tids []int, groups [][]Event) (*Set, error) {
	s := &Set{Pid: pid, threads: map[int][]openGroup{}}
	for gi, g := range groups {
		for _, e := range g {
			s.events = append(s.events, member{info: EventInfo{Name: e.Name, Group: gi}, ev: e})
		}
	}
	if len(tids) == 0 {
		tids = []int{pid}
	}
	// Plan on the first thread that is still alive.
	var first int
	for i, tid := range tids {
		if err := s.planOn(tid, groups); err != nil {
			if errors.Is(err, unix.ESRCH) && i+1 < len(tids) {
				continue
			}
			s.Close()
			return nil, err
		}
		first = i
		break
	}
	for _, tid := range tids[first+1:] {
		if err := s.openThread(tid); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			s.Notes = append(s.Notes, fmt.Sprintf("tid %d: %v", tid, err))
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				s.Notes = append(s.Notes, "out of file descriptors: later threads are not counted")
				break
			}
		}
	}
	return s, nil
}

// planOn opens every group on tid, deciding which events are supported.
func (s *Set) planOn(tid int, groups [][]Event) error {
	idx := 0
	var denied error
	for _, g := range groups {
		ids := make([]int, len(g))
		for i := range g {
			ids[i] = idx + i
		}
		idx += len(g)
		og, err := s.openPlanned(tid, plan{ids})
		if err == nil {
			s.plans = append(s.plans, plan{ids})
			s.threads[tid] = append(s.threads[tid], og)
			for _, m := range ids {
				s.events[m].info.Supported = true
				s.events[m].info.UserOnly = s.exclK
			}
			continue
		}
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("tid %d: %w", tid, err)
		}
		// Split the group: each event alone.
		for _, m := range ids {
			og, err := s.openPlanned(tid, plan{[]int{m}})
			if err == nil {
				s.plans = append(s.plans, plan{[]int{m}})
				s.threads[tid] = append(s.threads[tid], og)
				s.events[m].info.Supported = true
				s.events[m].info.UserOnly = s.exclK
				continue
			}
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("tid %d: %w", tid, err)
			}
			s.events[m].info.Reason = reason(err)
			if isDenied(err) {
				denied = err
			}
		}
	}
	if denied != nil {
		s.Denied = gate(denied)
		anyOK := false
		for _, m := range s.events {
			anyOK = anyOK || m.info.Supported
		}
		if !anyOK {
			return &capability.GateError{Op: fmt.Sprintf("count perf events of pid %d", s.Pid),
				Gate: s.Denied, Fix: fixFor(), Err: errors.Join(ErrDenied, capability.ErrPermission, denied)}
		}
	}
	return nil
}

func (s *Set) openThread(tid int) error {
	for pi, p := range s.plans {
		og, err := s.openPlanned(tid, p)
		if err != nil {
			return err
		}
		og.plan = pi
		s.threads[tid] = append(s.threads[tid], og)
	}
	return nil
}

// openPlanned opens one group on tid; on EACCES it retries once with
// exclude_kernel (perf_event_paranoid ≥ 2 lets users count their own
// processes' user-space events only) and remembers that.
func (s *Set) openPlanned(tid int, p plan) (openGroup, error) {
	og := openGroup{leader: -1, ids: map[uint64]int{}}
	closeAll := func() {
		for _, fd := range og.fds {
			unix.Close(fd)
		}
	}
	for i, m := range p.members {
		group := -1
		if i > 0 {
			group = og.leader
		}
		fd, err := open(s.events[m].ev, tid, group, s.exclK)
		if (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) && !s.exclK {
			if fd2, err2 := open(s.events[m].ev, tid, group, true); err2 == nil {
				s.exclK = true
				fd, err = fd2, nil
			}
		}
		if err != nil {
			closeAll()
			return openGroup{}, err
		}
		var id uint64
		if err := ioctlID(fd, &id); err != nil {
			unix.Close(fd)
			closeAll()
			return openGroup{}, fmt.Errorf("PERF_EVENT_IOC_ID: %w", err)
		}
		if i == 0 {
			og.leader = fd
		}
		og.fds = append(og.fds, fd)
		og.ids[id] = m
	}
	return og, nil
}

func open(e Event, tid, group int, excludeKernel bool) (int, error) {
	a := unix.PerfEventAttr{Type: e.Type, Config: e.Config, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	a.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING |
		unix.PERF_FORMAT_ID | unix.PERF_FORMAT_GROUP
	a.Bits = unix.PerfBitInherit | unix.PerfBitExcludeHv
	if excludeKernel {
		a.Bits |= unix.PerfBitExcludeKernel
	}
	fd, err := unix.PerfEventOpen(&a, tid, -1, group, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("perf_event_open %s tid %d: %w", e.Name, tid, err)
	}
	return fd, nil
}

func ioctlID(fd int, id *uint64) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.PERF_EVENT_IOC_ID), uintptr(unsafe.Pointer(id)))
	if e != 0 {
		return e
	}
	return nil
}

// Read reads every thread's groups. A group that can't be read (the
// counter went away) is left out; its thread then counts from zero in a
// later window, which Window clamps.
func (s *Set) Read() (Reading, error) {
	r := Reading{Events: s.Events(), Threads: make(map[int][]Triple, len(s.threads))}
	buf := make([]byte, 24+16*maxGroup)
	for tid, groups := range s.threads {
		vals := make([]Triple, len(s.events))
		for _, og := range groups {
			n, err := unix.Read(og.leader, buf[:24+16*len(og.fds)])
			if err != nil {
				return Reading{}, fmt.Errorf("can't read perf counters of tid %d: %w", tid, err)
			}
			g, err := DecodeGroupRead(buf[:n])
			if err != nil {
				return Reading{}, fmt.Errorf("tid %d: %w", tid, err)
			}
			for _, v := range g.Values {
				if m, ok := og.ids[v.ID]; ok {
					vals[m] = Triple{v.Value, g.Enabled, g.Running}
				}
			}
		}
		r.Threads[tid] = vals
	}
	return r, nil
}

// Threads lists the TIDs counted, sorted.
func (s *Set) Threads() []int {
	out := make([]int, 0, len(s.threads))
	for t := range s.threads {
		out = append(out, t)
	}
	sort.Ints(out)
	return out
}

// AddThread starts counting a thread that the set does not count yet and
// that was not created by a counted one (rare: inherit covers the usual case).
func (s *Set) AddThread(tid int) error {
	if _, ok := s.threads[tid]; ok {
		return nil
	}
	return s.openThread(tid)
}

// Close releases every descriptor.
func (s *Set) Close() {
	for _, groups := range s.threads {
		for _, og := range groups {
			for _, fd := range og.fds {
				unix.Close(fd)
			}
		}
	}
	s.threads = map[int][]openGroup{}
}

func isDenied(err error) bool { return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) }

// reason words why an event did not open.
func reason(err error) string {
	var en unix.Errno
	errors.As(err, &en)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV),
		errors.Is(err, unix.ENOSYS):
		return fmt.Sprintf("not supported (%s): no such event on this machine (a VM without a virtual PMU has no hardware events)", unix.ErrnoName(en))
	case errors.Is(err, unix.EINVAL):
		return "not supported: the kernel rejected the event (EINVAL)"
	case isDenied(err):
		return "permission denied: " + gate(err)
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return "out of file descriptors (RLIMIT_NOFILE)"
	case errors.Is(err, unix.EBUSY):
		return "not supported now: the PMU is in exclusive use by someone else (EBUSY)"
	}
	return err.Error()
}

func gate(err error) string {
	p := capability.PerfEventParanoid()
	switch {
	case !capability.Has(capability.CapPerfmon) && !capability.Has(capability.CapSysAdmin) && p >= 3:
		return fmt.Sprintf("kernel.perf_event_paranoid=%d (no perf events without CAP_PERFMON)", p)
	case !capability.Has(capability.CapPerfmon) && !capability.Has(capability.CapSysAdmin):
		return fmt.Sprintf("kernel.perf_event_paranoid=%d without CAP_PERFMON, or the target is not ours (ptrace access check)", p)
	case capability.SeccompFilter() != "":
		return "a seccomp filter on pyobs itself (" + capability.SeccompFilter() + "; e.g. a container's seccomp profile)"
	}
	return fmt.Sprintf("the kernel's access check (%v)", err)
}

func fixFor() string {
	return "run as root, or grant CAP_PERFMON (setcap cap_perfmon+ep pyobs), or lower kernel.perf_event_paranoid (sysctl kernel.perf_event_paranoid=1)"
}
