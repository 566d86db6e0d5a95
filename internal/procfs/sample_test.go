package procfs

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func fixture(t testing.TB, sub string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "procfs", sub)
}

func fixtureFS(t testing.TB, sub string) FS {
	t.Helper()
	fs, err := NewFS(fixture(t, sub))
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestProcSampleFixture: a process whose comm has spaces and parentheses,
// a thread whose comm fakes a state, a MaxUint64 rchar.
func TestProcSampleFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	s, err := fs.Sample(4242, SampleOptions{Smaps: true, Threads: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Comm != "(a b ) ( c d) " || s.State != "S" {
		t.Errorf("comm %q state %q", s.Comm, s.State)
	}
	if s.UTimeTicks != 250 || s.STimeTicks != 40 || s.MinFlt != 1500 || s.MajFlt != 3 || s.NumThreads != 2 {
		t.Errorf("stat: %+v", s)
	}
	if s.VoluntaryCtxt != 120 || s.NonVolCtxt != 7 || s.VmHWM != 12288*1024 || s.VmRSS != 10240*1024 {
		t.Errorf("status: vol %d nonvol %d hwm %d rss %d", s.VoluntaryCtxt, s.NonVolCtxt, s.VmHWM, s.VmRSS)
	}
	if !s.HasIO || s.IO.RChar != math.MaxUint64 || s.IO.WriteBytes != 4096 {
		t.Errorf("io: %+v", s.IO)
	}
	if !s.HasSmaps || s.Smaps.Pss != 8192*1024 || s.Smaps.PssAnon != 6144*1024 || s.Smaps.PssShmem != 48*1024 || !s.Smaps.HasPssSplit {
		t.Errorf("smaps: %+v", s.Smaps)
	}
	if !s.HasFDs || s.FDs != 5 || s.FDSoft != 1024 || s.FDHard != 524288 {
		t.Errorf("fds %d soft %d hard %d", s.FDs, s.FDSoft, s.FDHard)
	}
	if len(s.Missing) != 0 {
		t.Errorf("missing: %v", s.Missing)
	}
	if len(s.Threads) != 2 {
		t.Fatalf("threads: %+v", s.Threads)
	}
	m, w := s.Threads[0], s.Threads[1]
	if m.Tid != 4242 || m.Wchan != "hrtimer_nanosleep" || m.Syscall != 230 || m.RunNs != 600000000 || m.WaitNs != 1000000 || m.Timeslices != 120 {
		t.Errorf("main thread: %+v", m)
	}
	if w.Comm != "worker) R (x" || w.State != "R" || w.Wchan != "" || w.Syscall != -1 || w.UTimeTicks != 200 || w.VoluntaryCtxt != 20 || w.Processor != 1 {
		t.Errorf("worker thread: %+v", w)
	}
}

// TestProcSampleOldKernel: no smaps_rollup, io, schedstat or fd dir; a
// MaxInt64 utime; limits "unlimited". Missing files are named, not fatal.
func TestProcSampleOldKernel(t *testing.T) {
	fs := fixtureFS(t, "proc")
	s, err := fs.Sample(777, SampleOptions{Smaps: true, Threads: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.UTimeTicks != math.MaxInt64 {
		t.Errorf("utime %d", s.UTimeTicks)
	}
	if s.HasSmaps || s.HasIO || s.HasFDs {
		t.Errorf("has smaps %v io %v fds %v", s.HasSmaps, s.HasIO, s.HasFDs)
	}
	if s.FDSoft != math.MaxUint64 || s.FDHard != math.MaxUint64 {
		t.Errorf("unlimited nofile: %d %d", s.FDSoft, s.FDHard)
	}
	joined := strings.Join(s.Missing, "; ")
	for _, want := range []string{"smaps_rollup", "io", "fd"} {
		if !strings.Contains(joined, want+":") {
			t.Errorf("missing %q not reported in %q", want, joined)
		}
	}
	if len(s.Threads) != 1 || s.Threads[0].HasSched || s.Threads[0].HasStatus || s.Threads[0].State != "D" || s.Threads[0].Wchan != "io_schedule" {
		t.Errorf("thread: %+v", s.Threads)
	}
}

func TestProcSampleNoProcess(t *testing.T) {
	fs := fixtureFS(t, "proc")
	if _, err := fs.Sample(99999, SampleOptions{}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("err %v, want ErrNoProcess", err)
	}
}

func TestProcCgroupV1(t *testing.T) {
	cg := Cgroups{Proc: fixtureFS(t, "proc"), Root: fixture(t, "")}
	pl, err := cg.Locate(4242)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Version != 1 || pl.Path != "/pyobs-test" || !strings.HasSuffix(pl.CPUDir, "sys/fs/cgroup/cpu,cpuacct/pyobs-test") {
		t.Fatalf("place %+v", pl)
	}
	if pl.V2Path != "/user.slice" || pl.V2Dir == "" {
		t.Errorf("v2 part %+v", pl)
	}
	c, err := cg.ReadCPU(pl)
	if err != nil {
		t.Fatal(err)
	}
	want := CgroupCPU{Version: 1, NrPeriods: 100, NrThrottled: 80, ThrottledNs: 1600000000, UsageNs: 2000000000, HasThrottle: true, QuotaUS: 20000, PeriodUS: 100000}
	if c != want {
		t.Errorf("cpu %+v\nwant %+v", c, want)
	}
	if q := c.QuotaCores(); q != 0.2 {
		t.Errorf("quota %v cores", q)
	}
	// user.slice has no cpu.pressure: the system's PSI.
	ps := cg.ReadPressure(pl)
	if ps.Source != "system" || ps.CPU == nil || ps.CPU.Some.TotalUS != 30247250 || ps.IO == nil || ps.IO.Full.Avg10 != 2 {
		t.Errorf("pressure %+v", ps)
	}
}

func TestProcCgroupV2(t *testing.T) {
	cg := Cgroups{Proc: fixtureFS(t, "v2/proc"), Root: fixture(t, "v2")}
	pl, err := cg.Locate(777)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Version != 2 || pl.Path != "/app.slice/web.service" {
		t.Fatalf("place %+v", pl)
	}
	c, err := cg.ReadCPU(pl)
	if err != nil {
		t.Fatal(err)
	}
	// v2 writes µs: normalised to ns.
	want := CgroupCPU{Version: 2, NrPeriods: 50, NrThrottled: 10, ThrottledNs: 250000000, UsageNs: 5000000000, HasThrottle: true, QuotaUS: 50000, PeriodUS: 100000}
	if c != want {
		t.Errorf("cpu %+v\nwant %+v", c, want)
	}
	ps := cg.ReadPressure(pl)
	if ps.Source != "cgroup /app.slice/web.service" || ps.CPU == nil || ps.CPU.Some.Avg10 != 12.5 || ps.CPU.Full.TotalUS != 100000 {
		t.Errorf("pressure %+v", ps)
	}
}

// TestProcCgroupContainerRoot: a v1 mount whose root is the container's own
// cgroup (/docker/abc): the cgroup is the mount point itself.
func TestProcCgroupContainerRoot(t *testing.T) {
	cg := Cgroups{Proc: fixtureFS(t, "ctr/proc"), Root: fixture(t, "ctr")}
	pl, err := cg.Locate(55)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Version != 1 || !strings.HasSuffix(pl.CPUDir, "sys/fs/cgroup/cpu,cpuacct") {
		t.Fatalf("place %+v", pl)
	}
	c, err := cg.ReadCPU(pl)
	if err != nil || c.NrPeriods != 7 || c.QuotaUS != -1 || c.QuotaCores() != 0 {
		t.Errorf("cpu %+v err %v", c, err)
	}
}

func TestProcCgroupNone(t *testing.T) {
	// pid 777 in the hybrid tree sits in a v2 cgroup the tree does not have.
	cg := Cgroups{Proc: fixtureFS(t, "proc"), Root: fixture(t, "")}
	pl, err := cg.Locate(777)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Version != 0 {
		t.Errorf("place %+v, want none", pl)
	}
	if _, err := cg.ReadCPU(pl); err == nil {
		t.Error("ReadCPU without a controller: no error")
	}
}

func TestProcParsers(t *testing.T) {
	if q, p, err := ParseCPUMax("max 100000\n"); err != nil || q != -1 || p != 100000 {
		t.Errorf("max: %d %d %v", q, p, err)
	}
	if q, p, err := ParseCPUMax("20000 50000"); err != nil || q != 20000 || p != 50000 {
		t.Errorf("quota: %d %d %v", q, p, err)
	}
	for _, bad := range []string{"", "x 100", "100 0", "-5 100", "1 2 3"} {
		if _, _, err := ParseCPUMax(bad); err == nil {
			t.Errorf("ParseCPUMax(%q): no error", bad)
		}
	}
	if _, err := ParsePSI(strings.NewReader("some avg10=1 avg60=2 avg300=3\n")); err == nil {
		t.Error("PSI without total: no error")
	}
	if _, err := ParsePSI(strings.NewReader("full avg10=1 avg60=2 avg300=3 total=4\n")); err == nil {
		t.Error("PSI without some: no error")
	}
	p, err := ParsePSI(strings.NewReader("some avg10=0.50 avg60=0.00 avg300=0.00 total=7\n"))
	if err != nil || p.HasFull || p.Some.TotalUS != 7 {
		t.Errorf("cpu PSI before 5.13: %+v %v", p, err)
	}
	if _, err := ParseFlatKeyed(strings.NewReader("nr_periods 1 2\n")); err == nil {
		t.Error("3 fields: no error")
	}
	if _, err := ParseFlatKeyed(strings.NewReader("nr_periods 18446744073709551616\n")); err == nil {
		t.Error("overflow: no error")
	}
	if _, err := ParseSmapsRollup(strings.NewReader("Rss: 18014398509481984 kB\n")); err == nil {
		t.Error("kB overflowing bytes: no error")
	}
	if _, err := ParseSmapsRollup(strings.NewReader("")); err == nil {
		t.Error("empty smaps_rollup: no error")
	}
	old, err := ParseSmapsRollup(strings.NewReader("00400000-7ff0 ---p 00000000 00:00 0 [rollup]\nRss: 4 kB\nPss: 2 kB\n"))
	if err != nil || old.HasPssSplit || old.Pss != 2048 {
		t.Errorf("pre-5.9 rollup: %+v %v", old, err)
	}
}

// seeds adds every file under testdata/procfs whose name matches.
func seeds(f *testing.F, match func(path string) bool) {
	root := fixture(f, "")
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && match(p) {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
		return nil
	})
}

func FuzzParseSmapsRollup(f *testing.F) {
	seeds(f, func(p string) bool { return strings.HasSuffix(p, "smaps_rollup") })
	f.Add("Rss: 1 kB\nPss_Anon: x kB\n")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseSmapsRollup(strings.NewReader(s))
		if err != nil && r != (SmapsRollup{}) {
			t.Fatalf("error %v with a non-zero result %+v", err, r)
		}
		if err == nil && r.Pss > math.MaxUint64-1023 {
			t.Fatalf("overflow %d", r.Pss)
		}
	})
}

func FuzzParseFlatKeyed(f *testing.F) {
	seeds(f, func(p string) bool { return strings.HasSuffix(p, "cpu.stat") })
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseFlatKeyed(strings.NewReader(s))
		if err != nil && m != nil {
			t.Fatalf("error %v with a result", err)
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	seeds(f, func(p string) bool { return strings.HasSuffix(p, "cpu.max") })
	f.Add("max 100000")
	f.Fuzz(func(t *testing.T, s string) {
		q, p, err := ParseCPUMax(s)
		if err != nil && (q != 0 || p != 0) {
			t.Fatalf("error %v with %d %d", err, q, p)
		}
		if err == nil && (p == 0 || q == 0 || q < -1) {
			t.Fatalf("accepted %q as %d/%d", s, q, p)
		}
	})
}

func FuzzParsePSI(f *testing.F) {
	seeds(f, func(p string) bool { return strings.Contains(p, "pressure") })
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePSI(strings.NewReader(s))
		if err != nil && p != (PSI{}) {
			t.Fatalf("error %v with %+v", err, p)
		}
		if err == nil && (p.Some.Avg10 < 0 || p.Some.Avg10 > 100 || math.IsNaN(p.Some.Avg10)) {
			t.Fatalf("bad avg10 %v", p.Some.Avg10)
		}
	})
}

func FuzzParseNofile(f *testing.F) {
	seeds(f, func(p string) bool { return strings.HasSuffix(p, "limits") })
	f.Fuzz(func(t *testing.T, s string) {
		a, b, err := ParseNofile(s)
		if err != nil && (a != 0 || b != 0) {
			t.Fatalf("error %v with %d %d", err, a, b)
		}
	})
}
