package tracepoint

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/testutil"
	"github.com/pyobs/pyobs/internal/trace/bucket"
)

func requireBPF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "loading BPF programs needs CAP_BPF and CAP_PERFMON: not root")
	}
}

// The engine on this test process itself: it makes exactly n failing stats
// of a path that does not exist, and sleeps once for 30 ms.
func TestTracerCountsSelf(t *testing.T) {
	requireBPF(t)
	tr, err := Open(Config{Pid: os.Getpid(), Slow: 20 * time.Millisecond,
		Filter: map[int]bool{unix.SYS_NEWFSTATAT: true, unix.SYS_NANOSLEEP: true, unix.SYS_CLOCK_NANOSLEEP: true}})
	if err != nil {
		t.Fatalf("open: %v (%s)", err, Gate())
	}
	defer tr.Close()
	base := baseline(t, tr)
	const n = 137
	var st unix.Stat_t
	for i := 0; i < n; i++ {
		if err := unix.Fstatat(unix.AT_FDCWD, "/nonexistent/pyobs-tracepoint-test", &st, 0); err != unix.ENOENT {
			t.Fatalf("stat: %v", err)
		}
	}
	ts := unix.Timespec{Nsec: 30e6}
	t0 := time.Now()
	_ = unix.Nanosleep(&ts, nil)
	slept := time.Since(t0)
	var evs []Event
	if err := tr.ReadEvents(time.Now().Add(50*time.Millisecond), func(e Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	stats, c, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	var sawStat, sawSleep bool
	for _, s := range stats {
		switch s.Nr {
		case unix.SYS_NEWFSTATAT:
			sawStat = true
			d := since(base, s)
			if d.Calls != n || d.Errors != n || d.Errnos[int(unix.ENOENT)] != n {
				t.Errorf("newfstatat: %+v, want %d calls, all ENOENT", d, n)
			}
			var h uint64
			for _, v := range d.Hist {
				h += v
			}
			if h != n {
				t.Errorf("histogram holds %d calls, want %d", h, n)
			}
			// The kernel's bucketing is trace.Hist's: the slowest and the
			// fastest call fall in the buckets Go computes for them.
			if s.Hist[bucket.Of(uint64(s.Max))] == 0 || s.Hist[bucket.Of(uint64(s.Min))] == 0 {
				t.Errorf("min %v / max %v not in their buckets %d, %d: %v", s.Min, s.Max, bucket.Of(uint64(s.Min)), bucket.Of(uint64(s.Max)), s.Hist)
			}
		case unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP:
			if s.Max >= 30*time.Millisecond && s.Max <= slept+time.Millisecond {
				sawSleep = true
			}
		default:
			t.Errorf("syscall %d counted although filtered out", s.Nr)
		}
	}
	if !sawStat || !sawSleep {
		t.Errorf("stat seen %v, a sleep of 30ms..%v seen %v: %+v", sawStat, slept, sawSleep, stats)
	}
	var failing, slow int
	for _, e := range evs {
		if e.Nr == unix.SYS_NEWFSTATAT && e.Ret == -int64(unix.ENOENT) {
			failing++
		}
		if e.Dur >= 30*time.Millisecond {
			slow++
		}
		if e.Py != PyOff {
			t.Errorf("event with capture off says py %d", e.Py)
		}
	}
	if failing+int(c.EventsDropped) != n || slow != 1 {
		t.Errorf("events: %d failing stats (+%d dropped), %d slow; want %d and 1", failing, c.EventsDropped, slow, n)
	}
}

func TestDecodeEvent(t *testing.T) {
	b := make([]byte, EventSize)
	b[28] = 0x01 // nr 256+
	b[29] = 0x02
	if _, err := DecodeEvent(b); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("nr 513 accepted: %v", err)
	}
	if _, err := DecodeEvent(b[:10]); err == nil {
		t.Fatal("short event accepted")
	}
	b[29] = 0
	b[8] = 5
	b[56] = 1
	e, err := DecodeEvent(b)
	if err != nil || e.Nr != 1 || e.Dur != 5 || e.Py != PyCaptured {
		t.Fatalf("%+v %v", e, err)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(make([]byte, EventSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err == nil && (e.Nr < 0 || e.Nr >= MaxNr || e.Dur < 0) {
			t.Fatalf("accepted %+v", e)
		}
	})
}

// Bounded maps: with a one-page ring buffer and a one-entry errno map, what
// does not fit is counted, and counts and totals stay exact.
func TestTracerDropsCounted(t *testing.T) {
	requireBPF(t)
	tr, err := Open(Config{Pid: os.Getpid(), Slow: time.Hour, Filter: map[int]bool{unix.SYS_NEWFSTATAT: true, unix.SYS_FACCESSAT: true, unix.SYS_FACCESSAT2: true},
		RingBytes: 4096, ErrnoEntries: 1})
	if err != nil {
		t.Fatalf("open: %v (%s)", err, Gate())
	}
	defer tr.Close()
	base := baseline(t, tr)
	const n = 500
	var st unix.Stat_t
	for i := 0; i < n; i++ {
		_ = unix.Fstatat(unix.AT_FDCWD, "/nonexistent/pyobs-drop-test", &st, 0) // ENOENT: takes the errno map's one entry
	}
	for i := 0; i < n; i++ {
		_ = unix.Faccessat(unix.AT_FDCWD, "/nonexistent/pyobs-drop-test/x", unix.R_OK, 0) // ENOENT of another syscall: no room
	}
	got := 0
	if err := tr.ReadEvents(time.Time{}, func(Event) { got++ }); err != nil {
		t.Fatal(err)
	}
	stats, c, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	var calls, errs, inErrno uint64
	for _, s := range stats {
		s = since(base, s)
		calls += s.Calls
		errs += s.Errors
		for _, v := range s.Errnos {
			inErrno += v
		}
	}
	if calls != 2*n || errs != 2*n {
		t.Fatalf("counts not exact under drops: %d calls, %d errors, want %d", calls, errs, 2*n)
	}
	if c.EventsDropped == 0 || uint64(got)+c.EventsDropped != 2*n {
		t.Errorf("ring of one page: %d events read + %d dropped, want %d with drops", got, c.EventsDropped, 2*n)
	}
	if c.ErrnoDropped != n || inErrno != n {
		t.Errorf("one-entry errno map: %d kept, %d dropped; want %d and %d", inErrno, c.ErrnoDropped, n, n)
	}
}

// baseline is the account right after Open: the test's process is the
// traced one, and the set's start reads its /proc/self/cmdline (an
// openat, a newfstatat, a read, a close) once the calls are counted.
func baseline(t *testing.T, tr *Tracer) map[int]NrStat {
	t.Helper()
	stats, _, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]NrStat{}
	for _, s := range stats {
		m[s.Nr] = s
	}
	return m
}

// since is s less what base had of its syscall (calls, errors, errnos,
// histogram; min and max stay s's).
func since(base map[int]NrStat, s NrStat) NrStat {
	b, ok := base[s.Nr]
	if !ok {
		return s
	}
	d := s
	d.Calls, d.Errors = s.Calls-b.Calls, s.Errors-b.Errors
	d.Hist, d.Errnos = map[int]uint64{}, map[int]uint64{}
	for k, v := range s.Hist {
		if v -= b.Hist[k]; v > 0 {
			d.Hist[k] = v
		}
	}
	for k, v := range s.Errnos {
		if v -= b.Errnos[k]; v > 0 {
			d.Errnos[k] = v
		}
	}
	return d
}

// BenchmarkGetpid: the price of the programs on a cheap syscall of a traced
// process (this one): ns per getpid bare and traced, and the programs' own
// run time per call from the kernel's BPF statistics (steady on a loaded
// machine, where wall-clock ratios are not).
func BenchmarkGetpid(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("BPF needs root")
	}
	b.Run("bare", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = unix.Getpid()
		}
	})
	// Every process pays the syscall-tracepoint path while the programs are
	// attached (the programs return at the tgid check for them).
	b.Run("other-process-traced", func(b *testing.B) {
		tr, err := Open(Config{Pid: 1, Slow: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = unix.Getpid()
		}
	})
	b.Run("traced", func(b *testing.B) {
		tr, err := Open(Config{Pid: os.Getpid(), Slow: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			b.Fatal(err)
		}
		defer stats.Close()
		before := map[string]*ebpf.ProgramStats{}
		progs := map[string]*ebpf.Program{"sys_enter": tr.objs.SysEnter, "sys_exit": tr.objs.SysExit}
		for name, p := range progs {
			before[name], _ = p.Stats()
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = unix.Getpid()
		}
		b.StopTimer()
		var ns float64
		for name, p := range progs {
			s, err := p.Stats()
			if err != nil || before[name] == nil {
				b.Fatalf("stats of %s: %v", name, err)
			}
			if n := s.RunCount - before[name].RunCount; n > 0 {
				ns += float64(s.Runtime-before[name].Runtime) / float64(n)
			}
		}
		b.ReportMetric(ns, "bpf-ns/call")
	})
}
