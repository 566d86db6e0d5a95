package capability

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fixture builds a fake root with the given files and points Root at it.
func fixture(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := Root
	Root = dir + "/"
	t.Cleanup(func() { Root = old })
}

// status returns a /proc/self/status with the given effective capabilities.
func status(capEff string) string {
	return "Name:\tpyobs\nCapInh:\t0000000000000000\nCapEff:\t" + capEff + "\n"
}

func TestExplainPtraceNamesTheGate(t *testing.T) {
	const none = "0000000000000000"
	const ptrace = "0000000000080000" // bit 19
	cases := []struct {
		name    string
		scope   string // "" = no Yama
		capEff  string
		sameUID bool
		want    []string
	}{
		{"other-user", "", none, false, []string{"CAP_SYS_PTRACE", "setcap cap_sys_ptrace+ep"}},
		{"scope-1", "1", none, true, []string{"ptrace_scope=1", "sysctl kernel.yama.ptrace_scope=0", "-- CMD"}},
		{"scope-2", "2", none, true, []string{"ptrace_scope=2", "CAP_SYS_PTRACE"}},
		{"scope-3", "3", ptrace, true, []string{"ptrace_scope=3", "reboot"}},
		{"scope-1-with-cap", "1", ptrace, true, []string{"PTRACE_MODE_ATTACH"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"proc/self/status": status(c.capEff)}
			if c.scope != "" {
				files["proc/sys/kernel/yama/ptrace_scope"] = c.scope + "\n"
			}
			fixture(t, files)
			err := ExplainPtrace("read pid 42 memory", 42, c.sameUID, syscall.EPERM)
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not mention %q", msg, w)
				}
			}
			if !errors.Is(err, ErrPermission) || !errors.Is(err, syscall.EPERM) {
				t.Errorf("error does not wrap ErrPermission and EPERM: %v", err)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("message is not one line: %q", msg)
			}
		})
	}
}

func TestProbes(t *testing.T) {
	fixture(t, map[string]string{
		"proc/sys/kernel/perf_event_paranoid": "3\n",
		"proc/self/status":                    status("000001c000080000"),
		"sys/kernel/btf/vmlinux":              "",
		"sys/kernel/tracing/events/x":         "",
	})
	if got := PerfEventParanoid(); got != 3 {
		t.Errorf("perf_event_paranoid %d, want 3", got)
	}
	if PtraceScope() != -1 {
		t.Errorf("no Yama file, but PtraceScope = %d", PtraceScope())
	}
	if !Has(CapSysPtrace) || !Has(CapPerfmon) || !Has(CapBPF) || Has(CapSysAdmin) {
		t.Errorf("capabilities misread from CapEff 000001c000080000: %x", Effective())
	}
	if !BTF() || Tracefs() != "/sys/kernel/tracing" {
		t.Errorf("BTF %v, tracefs %q", BTF(), Tracefs())
	}
	fixture(t, map[string]string{"proc/self/status": "garbage"})
	if Effective() != 0 || PerfEventParanoid() != 2 {
		t.Errorf("unreadable files must read as no capabilities and paranoid 2")
	}
}

func TestBPFGateSaysWhatIsHeld(t *testing.T) {
	fixture(t, map[string]string{
		"proc/self/status":                          status("0000008000000000"), // CAP_BPF (39) only
		"proc/sys/kernel/unprivileged_bpf_disabled": "2\n",
	})
	g := BPFGate()
	for _, want := range []string{"CAP_BPF yes", "CAP_PERFMON no", "CAP_SYS_ADMIN no", "kernel.unprivileged_bpf_disabled=2"} {
		if !strings.Contains(g, want) {
			t.Errorf("gate %q lacks %q", g, want)
		}
	}
	e := ExplainBPF("load red's BPF programs", syscall.EPERM)
	if !errors.Is(e, ErrPermission) || !errors.Is(e, syscall.EPERM) || !strings.Contains(e.Error(), "can't load red's BPF programs: permission denied by the BPF gate") {
		t.Errorf("ExplainBPF: %v", e)
	}
}

// TestExplainPtraceNoGuess: a refusal that none of the gates pyobs can
// check explains (CAP_SYS_PTRACE held, no Yama, no seccomp filter on
// pyobs) is not blamed on a container's seccomp profile: the message says
// what was checked, and names the capabilities the target holds that
// pyobs lacks. A seccomp filter on pyobs itself is named when it is there.
func TestExplainPtraceNoGuess(t *testing.T) {
	const self = "Name:\tpyobs\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\nNoNewPrivs:\t0\nSeccomp:\t%s\nSeccomp_filters:\t%s\n"
	const target = "Name:\tinit\nTracerPid:\t0\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nNoNewPrivs:\t0\nSeccomp:\t0\n"
	cases := []struct {
		name, seccomp, filters string
		want, not              []string
	}{
		{"no-filter", "0", "0", []string{"PTRACE_MODE_ATTACH", "cannot see", "pyobs holds CAP_SYS_PTRACE", "no Yama", "Seccomp 0",
			"no thread of the target is traced", "CAP_SYS_RESOURCE"}, []string{"seccomp profile", "missing CAP_SYS_PTRACE"}},
		{"own-filter", "2", "1", []string{"seccomp filter on pyobs itself", "Seccomp: 2, 1 filters"}, []string{"cannot see"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fixture(t, map[string]string{
				"proc/self/status": fmt.Sprintf(self, c.seccomp, c.filters),
				"proc/1/status":    target,
			})
			msg := ExplainPtrace("read /proc/1/maps of pid 1", 1, true, syscall.EPERM).Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not mention %q", msg, w)
				}
			}
			for _, w := range c.not {
				if strings.Contains(msg, w) {
					t.Errorf("%q mentions %q, which was not the cause", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("message is not one line: %q", msg)
			}
		})
	}
}

// TestExplainPtraceOtherTracer: an attach refused because another process
// traces the target names that tracer; a memory read (which a tracer does
// not refuse) lists the tracer only among what was checked.
func TestExplainPtraceOtherTracer(t *testing.T) {
	fixture(t, map[string]string{
		"proc/self/status": "Name:\tpyobs\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n",
		"proc/42/status":   "Name:\tapp\nTracerPid:\t77\nCapPrm:\t000001ffffffffff\nSeccomp:\t0\nNoNewPrivs:\t0\n",
		"proc/77/status":   "Name:\tstrace\n",
	})
	msg := ExplainPtrace("stop threads of pid 42", 42, true, syscall.EPERM).Error()
	if !strings.Contains(msg, "another tracer: pid 77 (strace) already traces it") {
		t.Errorf("attach: %q does not name the tracer", msg)
	}
	msg = ExplainPtrace("read the Python threads of pid 42", 42, true, syscall.EPERM).Error()
	if strings.Contains(msg, "another tracer") || !strings.Contains(msg, "the target is traced by pid 77") {
		t.Errorf("read: %q blames the tracer or does not list it as checked", msg)
	}
}

// TestExplainPtraceThreadTracer: a tracer that holds one thread only
// (strace -p TID) refuses the attach of that thread: named, with the
// thread, not "the target is not traced" (the main thread's status).
func TestExplainPtraceThreadTracer(t *testing.T) {
	fixture(t, map[string]string{
		"proc/self/status":       "Name:\tpyobs\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n",
		"proc/42/status":         "Name:\tapp\nTracerPid:\t0\nCapPrm:\t000001ffffffffff\nSeccomp:\t0\nNoNewPrivs:\t0\n",
		"proc/42/task/42/status": "Name:\tapp\nTracerPid:\t0\n",
		"proc/42/task/43/status": "Name:\tapp\nTracerPid:\t77\n",
		"proc/77/status":         "Name:\tstrace\n",
	})
	msg := ExplainPtrace("stop threads of pid 42", 42, true, syscall.EPERM).Error()
	if !strings.Contains(msg, "another tracer: pid 77 (strace) already traces its thread 43") {
		t.Errorf("attach: %q does not name the thread's tracer", msg)
	}
	msg = ExplainPtrace("read the Python threads of pid 42", 42, true, syscall.EPERM).Error()
	if strings.Contains(msg, "another tracer") || !strings.Contains(msg, "its thread 43 is traced by pid 77") {
		t.Errorf("read: %q blames the tracer or does not list it as checked", msg)
	}
}
