// Package capability probes, in one place, the kernel gates that decide what
// pyobs may do to another process: Yama's ptrace_scope, perf_event_paranoid,
// the caller's capabilities (CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF,
// CAP_SYS_ADMIN), BTF and tracefs. A refused operation is explained by a
// *GateError naming the gate and the fix; every eBPF engine words its gate
// with BPFGate (through internal/bpfload).
package capability

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
)

// Capability numbers (include/uapi/linux/capability.h).
const (
	CapSysPtrace = 19
	CapSysAdmin  = 21
	CapPerfmon   = 38
	CapBPF       = 39
)

// GateError says which kernel gate refused, what was asked, and how to open it.
type GateError struct {
	Op   string // what pyobs tried, e.g. "read pid 42 memory"
	Gate string // e.g. "kernel.yama.ptrace_scope=2"
	Fix  string
	Err  error
}

func (e *GateError) Error() string {
	return fmt.Sprintf("can't %s: permission denied by %s; %s", e.Op, e.Gate, e.Fix)
}

func (e *GateError) Unwrap() error { return e.Err }

// Root is where the probes read; tests point it at a fixture tree.
var Root = "/"

// proc is the proc filesystem under Root (every /proc read is procfs's).
func proc() procfs.FS {
	fs, err := procfs.NewFS(filepath.Join(Root, "proc"))
	if err != nil {
		return procfs.Default()
	}
	return fs
}

// sysctl reads an integer sysctl ("kernel/perf_event_paranoid").
func sysctl(name string) (int, bool) {
	v, err := proc().Sysctl(name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// PtraceScope is kernel.yama.ptrace_scope, or -1 when Yama is absent.
func PtraceScope() int {
	if n, ok := sysctl("kernel/yama/ptrace_scope"); ok {
		return n
	}
	return -1
}

// PerfEventParanoid is kernel.perf_event_paranoid (2 when unreadable).
func PerfEventParanoid() int {
	if n, ok := sysctl("kernel/perf_event_paranoid"); ok {
		return n
	}
	return 2
}

// Effective returns the caller's effective capability mask.
func Effective() uint64 {
	st, err := proc().SelfStatus()
	if err != nil {
		return 0
	}
	return st.CapEff
}

// Has reports whether the caller holds capability c.
func Has(c int) bool { return Effective()&(1<<uint(c)) != 0 }

// BTF reports whether the kernel exposes its BTF (needed for tp_btf programs).
func BTF() bool {
	_, err := os.Stat(Root + "sys/kernel/btf/vmlinux")
	return err == nil
}

// Tracefs returns where tracefs is mounted, or "" when it is not.
func Tracefs() string {
	for _, p := range []string{"sys/kernel/tracing", "sys/kernel/debug/tracing"} {
		if _, err := os.Stat(Root + p + "/events"); err == nil {
			return "/" + p
		}
	}
	return ""
}

// InContainer is a best-effort guess used only to word advice.
func InContainer() bool {
	if _, err := os.Stat(Root + ".dockerenv"); err == nil {
		return true
	}
	b, _ := proc().Cgroup(1)
	s := string(b)
	return strings.Contains(s, "docker") || strings.Contains(s, "kubepods") || strings.Contains(s, "containerd")
}

// ErrPermission is matched by errors.Is on every GateError built here.
var ErrPermission = errors.New("permission denied")

// ExplainPtrace turns an EPERM on reading or tracing pid into the gate that
// most likely refused it. sameUID: the target runs as the caller's uid.
func ExplainPtrace(op string, pid int, sameUID bool, cause error) *GateError {
	e := &GateError{Op: op, Err: errors.Join(ErrPermission, cause)}
	scope := PtraceScope()
	hasPtrace := Has(CapSysPtrace)
	switch {
	case !hasPtrace && !sameUID:
		e.Gate = "missing CAP_SYS_PTRACE (the target belongs to another user)"
		e.Fix = fmt.Sprintf("run pyobs as root or as the target's user, or grant it: setcap cap_sys_ptrace+ep %s", exe())
	case scope == 3:
		e.Gate = "kernel.yama.ptrace_scope=3 (no attach at all, until reboot)"
		e.Fix = "only a reboot with a lower ptrace_scope lifts this"
	case scope == 2 && !hasPtrace:
		e.Gate = "kernel.yama.ptrace_scope=2 (admin-only attach)"
		e.Fix = fmt.Sprintf("run as root, or give pyobs CAP_SYS_PTRACE: setcap cap_sys_ptrace+ep %s", exe())
	case scope == 1 && !hasPtrace:
		e.Gate = "kernel.yama.ptrace_scope=1 (only a parent may attach)"
		e.Fix = "run as root, spawn the target with pyobs (-- CMD), or: sysctl kernel.yama.ptrace_scope=0"
	case InContainer():
		e.Gate = "the container's seccomp profile or missing CAP_SYS_PTRACE"
		e.Fix = "run the container with --cap-add SYS_PTRACE (and a seccomp profile allowing process_vm_readv/ptrace)"
	default:
		e.Gate = "the kernel's ptrace access check (PTRACE_MODE_ATTACH)"
		e.Fix = "run as root or as the target's user; a setuid or non-dumpable target needs CAP_SYS_PTRACE"
	}
	return e
}

func exe() string {
	p, err := os.Executable()
	if err != nil {
		return "pyobs"
	}
	return p
}
