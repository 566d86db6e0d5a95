package procfs

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of the procfs readers")

// golden compares v, as indented JSON, with testdata/procfs/golden/name.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := fixture(t, filepath.Join("golden", name))
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file:\n%s", name, got)
	}
}

// seedLines adds a fixture file, and each of its lines, to a fuzz corpus.
func seedLines(f *testing.F, rel string) {
	b, err := os.ReadFile(fixture(f, rel))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	for _, l := range strings.Split(string(b), "\n") {
		f.Add(l)
	}
}

func TestMapsFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	maps, err := fs.Maps(4242)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "maps.json", maps)
	m, ok := Containing(maps, 0x7f3a2c500010)
	if !ok || m.Path != "/tmp/my lib (deleted)" || !m.Exec() || !m.FileBacked() {
		t.Errorf("containing: %+v %v", m, ok)
	}
	if _, ok := Containing(maps, 0x1000); ok {
		t.Error("an address below every mapping is in one")
	}
	if _, err := fs.Maps(99999); err == nil || !strings.Contains(err.Error(), "99999") {
		t.Errorf("a missing pid: %v", err)
	}
}

func FuzzParseMaps(f *testing.F) {
	seedLines(f, "proc/4242/maps")
	f.Add("zz-1 r-xp 0 0 0")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := ParseMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		for i, m := range maps {
			if m.End <= m.Start || i > 0 && maps[i-1].Start > m.Start {
				t.Fatalf("%q: bad mapping %+v", s, m)
			}
		}
	})
}

func TestStatusFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	st, err := fs.Status(4242)
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "(a b ) ( c d)" || st.Tgid != 4242 || st.PPid != 1 || st.TracerPid != 0 || st.Fields["Threads"] != "2" {
		t.Errorf("%+v", st)
	}
	self, err := fs.SelfStatus()
	if err != nil || self.Tgid != 4242 {
		t.Errorf("self: %+v %v", self, err)
	}
	ts, err := fs.TaskStatus(6000, 6001)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ts.NSpid, []int{6001, 7}) || ts.Tgid != 6000 || ts.PPid != 5999 {
		t.Errorf("task: %+v", ts)
	}
	lead, _ := fs.Status(6000)
	if lead.SigCgt != 0x180004002 || lead.CapEff != 0x1ffffffffff {
		t.Errorf("masks: %+v", lead)
	}
	if _, err := fs.Status(99999); err == nil || !strings.Contains(err.Error(), "99999") {
		t.Errorf("a missing pid: %v", err)
	}
}

func FuzzParseStatus(f *testing.F) {
	seedLines(f, "proc/4242/status")
	seedLines(f, "proc/6000/status")
	f.Fuzz(func(t *testing.T, s string) {
		st := ParseStatus(s)
		if st.Fields == nil {
			t.Fatal("nil fields")
		}
	})
}

func TestNamespaceFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	if l, err := fs.SelfPidNamespace(); err != nil || l != InitPidNamespace {
		t.Errorf("self: %q %v", l, err)
	}
	if same, err := fs.SamePidNamespace(4242); err != nil || !same {
		t.Errorf("4242: %v %v", same, err)
	}
	if m := fs.HostTids(4242); m != nil {
		t.Errorf("same namespace, yet a map: %v", m)
	}
	if m := fs.HostTids(6000); !reflect.DeepEqual(m, map[int]int{1: 6000, 7: 6001}) {
		t.Errorf("6000: %v", m)
	}
}

func TestTaskFilesFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	names, err := fs.TaskStack(4242, 4243)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 7 || names[0] != "futex_wait_queue" || names[6] != "entry_SYSCALL_64_after_hwframe" {
		t.Errorf("stack: %q", names)
	}
	if _, err := fs.TaskStack(4242, 4242); err == nil || !strings.Contains(err.Error(), "tid 4242") {
		t.Errorf("no stack file: %v", err)
	}
	sc, err := fs.TaskSyscall(4242, 4242)
	if err != nil || sc.Nr != 230 || sc.Running || !reflect.DeepEqual(sc.Args, []uint64{1, 0, 0x7ffd, 0, 0, 0}) {
		t.Errorf("syscall: %+v %v", sc, err)
	}
	if sc, _ := fs.TaskSyscall(4242, 4243); sc.Nr != -1 || !sc.Running || sc.Args != nil {
		t.Errorf("running: %+v", sc)
	}
	if sc := ParseTaskSyscall("-1 0x7ffd1000 0x401000\n"); sc.Nr != -1 || sc.Running {
		t.Errorf("blocked outside a syscall (a page fault): %+v", sc)
	}
	if w, err := fs.TaskWchan(4242, 4242); err != nil || w != "hrtimer_nanosleep" {
		t.Errorf("wchan: %q %v", w, err)
	}
	if w, err := fs.TaskWchan(4242, 4243); err != nil || w != "" {
		t.Errorf("a running thread's wchan: %q %v", w, err)
	}
	st, err := fs.TaskStat(4242, 4243)
	if err != nil || st.State != "R" || st.Comm != "worker) R (x" {
		t.Errorf("task stat: %+v %v", st, err)
	}
	p, err := fs.Stat(4242)
	if err != nil || p.Comm != "(a b ) ( c d) " || p.CPUSeconds() != 2.9 || p.Flags&PFKthread != 0 {
		t.Errorf("stat: %+v %v", p, err)
	}
	if _, err := fs.Stat(99999); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing pid: %v", err)
	}
	if !fs.TaskExists(4242, 4243) || fs.TaskExists(4242, 1) || !fs.Exists(4242) || fs.Exists(99999) {
		t.Error("exists")
	}
}

func FuzzParseTaskSyscall(f *testing.F) {
	seedLines(f, "proc/4242/task/4243/syscall")
	f.Add("running")
	f.Fuzz(func(t *testing.T, s string) {
		sc := ParseTaskSyscall(s)
		if sc.Nr < 0 && sc.Args != nil || len(sc.Args) > 6 || sc.Running && sc.Nr != -1 {
			t.Fatalf("%q: %+v", s, sc)
		}
	})
}

func FuzzParseTaskStack(f *testing.F) {
	seedLines(f, "proc/4242/task/4243/stack")
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range ParseTaskStack(s) {
			if strings.ContainsAny(n, "+ \n") {
				t.Fatalf("%q: name %q", s, n)
			}
		}
	})
}

func TestNetTCPFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	socks, err := fs.NetTCP(4242)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "net_tcp.json", socks)
	if s := socks[31337]; s.State != TCPListen || s.LocalPort != 8080 {
		t.Errorf("listener: %+v", s)
	}
	if s := socks[41414]; s.State != TCPListen || s.LocalPort != 80 {
		t.Errorf("tcp6 listener: %+v", s)
	}
	if _, err := fs.NetTCP(99999); err == nil {
		t.Error("a missing pid has sockets")
	}
}

func FuzzParseNetTCP(f *testing.F) {
	for _, rel := range []string{"proc/4242/net/tcp", "proc/4242/net/tcp6"} {
		b, err := os.ReadFile(fixture(f, rel))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := map[uint64]NetTCPSocket{}
		ParseNetTCP([]byte(s), m)
		for ino, so := range m {
			if ino == 0 || so.Inode != ino || so.LocalPort > 65535 {
				t.Fatalf("%q: %d %+v", s, ino, so)
			}
		}
	})
}

func TestFdsFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	fds, err := fs.Fds(5151)
	if err != nil || len(fds) != 4 {
		t.Fatalf("%v %v", fds, err)
	}
	if l, err := fs.FdLink(5151, 3); err != nil || l != "socket:[31337]" {
		t.Errorf("fd 3: %q %v", l, err)
	}
	if _, err := fs.FdLink(5151, 9); err == nil || !strings.Contains(err.Error(), "pid 5151") {
		t.Errorf("fd 9: %v", err)
	}
}

func TestKallsymsFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	k, err := fs.Kallsyms()
	if err != nil || k.Hidden {
		t.Fatalf("%v hidden=%v", err, k.Hidden)
	}
	if n, _ := k.Lookup(0xffffffff81001010); n != "do_one_initcall" {
		t.Errorf("lookup: %q", n)
	}
	if n, _ := k.Lookup(0xffffffffc0a01008); n != "mod_init" {
		t.Errorf("module: %q", n)
	}
	if k2, _ := fs.Kallsyms(); k2 != k {
		t.Error("loaded twice")
	}
	none := fixtureFS(t, "ctr/proc")
	k, err = none.Kallsyms()
	var ke *KallsymsError
	if !errors.As(err, &ke) || ke.Parse || k == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v %+v", err, k)
	}
	if n, ok := k.Lookup(0xffffffff81000000); ok || n != "" {
		t.Errorf("the empty table names %q", n)
	}
}

func FuzzParseKallsyms(f *testing.F) {
	seedLines(f, "proc/kallsyms")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKallsyms(strings.NewReader(s))
		if err != nil {
			return
		}
		for i := 1; i < len(k.addrs); i++ {
			if k.addrs[i-1] > k.addrs[i] {
				t.Fatalf("%q: unsorted", s)
			}
		}
		_, _ = k.Lookup(0xffffffff81000000)
	})
}

func TestSystemFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	if n, err := fs.OnlineCPUs(); err != nil || n != 2 {
		t.Errorf("cpus: %d %v", n, err)
	}
	if d := fs.DelayAcct(); d != "on" {
		t.Errorf("delayacct: %q", d)
	}
	if v := fs.UnprivilegedBPF("?"); v != "2" {
		t.Errorf("unprivileged_bpf_disabled: %q", v)
	}
	none := fixtureFS(t, "ctr/proc")
	if d, v := none.DelayAcct(), none.UnprivilegedBPF("?"); d != "unknown" || v != "?" {
		t.Errorf("absent: %q %q", d, v)
	}
	if _, err := none.OnlineCPUs(); err == nil {
		t.Error("no stat file, yet CPUs")
	}
}

func FuzzCountCPULines(f *testing.F) {
	seedLines(f, "proc/stat")
	f.Fuzz(func(t *testing.T, s string) {
		if n := CountCPULines(s); n < 0 || n > strings.Count(s, "cpu") {
			t.Fatalf("%q: %d", s, n)
		}
	})
}

func TestPaths(t *testing.T) {
	fs := Default()
	for got, want := range map[string]string{
		fs.Path(42, "maps"):                "/proc/42/maps",
		fs.SelfExe():                       "/proc/self/exe",
		fs.ExePath(42):                     "/proc/42/exe",
		fs.CwdPath(42):                     "/proc/42/cwd",
		fs.RootPath(42, "/usr/lib/x.so"):   "/proc/42/root/usr/lib/x.so",
		fs.MapFilePath(42, 0x7f00, 0x7f10): "/proc/42/map_files/7f00-7f10",
		Label("io"):                        "/proc/PID/io",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	if l, err := fs.Exe(os.Getpid()); err != nil || l == "" {
		t.Errorf("own exe: %q %v", l, err)
	}
	if uid, err := fs.Owner(os.Getpid()); err != nil || uid != os.Geteuid() {
		t.Errorf("owner: %d %v", uid, err)
	}
	f, err := fs.OpenMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
