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

// SeccompFilter describes the seccomp filter pyobs itself runs under
// ("Seccomp: 2, N filters"), or "" when it runs under none (or its status
// is unreadable): a gate that can refuse any system call.
func SeccompFilter() string {
	st, err := proc().SelfStatus()
	if err != nil || st.Fields["Seccomp"] != "2" {
		return ""
	}
	return fmt.Sprintf("Seccomp: 2, %s filters", orUnknown(st.Fields["Seccomp_filters"]))
}

// ErrPermission is matched by errors.Is on every GateError built here.
var ErrPermission = errors.New("permission denied")

// ExplainPtrace turns an EPERM on reading or tracing pid into the gate that
// refused it, from what it can check: the caller's CAP_SYS_PTRACE and its
// own seccomp filter, Yama, the target's owner, tracer and capabilities.
// When none of those explains the refusal it says so and lists what was
// checked, never naming a gate it did not see. sameUID: the target runs
// as the caller's uid.
func ExplainPtrace(op string, pid int, sameUID bool, cause error) *GateError {
	e := &GateError{Op: op, Err: errors.Join(ErrPermission, cause)}
	scope := PtraceScope()
	self, _ := proc().SelfStatus()
	hasPtrace := self.CapEff&(1<<CapSysPtrace) != 0
	target, terr := proc().Status(pid)
	tracer, tracedTid := target.TracerPid, 0
	if terr == nil && tracer == 0 {
		// A tracer may hold some threads only (strace -p TID): each thread
		// has its own.
		tracer, tracedTid = threadTracer(pid)
	}
	// Capabilities the target holds and pyobs does not: Linux's capability
	// check for ptrace (cap_ptrace_access_check) then wants CAP_SYS_PTRACE
	// in the target's user namespace.
	var extra uint64
	if terr == nil {
		extra = statusHex(target, "CapPrm") &^ statusHex(self, "CapPrm")
	}
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
	case attaching(op) && terr == nil && tracer > 0 && tracer != os.Getpid():
		what := "it"
		if tracedTid != 0 {
			what = fmt.Sprintf("its thread %d", tracedTid)
		}
		e.Gate = fmt.Sprintf("another tracer: pid %d%s already traces %s, and a thread has only one tracer", tracer, procName(tracer), what)
		e.Fix = "detach that tracer (a debugger or strace) first, or use a command that does not stop threads (dump without --lock/--native, trace's eBPF engine)"
	case self.Fields["Seccomp"] == "2":
		e.Gate = fmt.Sprintf("a seccomp filter on pyobs itself (%s; e.g. a container's seccomp profile)", SeccompFilter())
		e.Fix = "run pyobs without that filter, or with a profile allowing ptrace and process_vm_readv (docker: --cap-add SYS_PTRACE)"
	case !hasPtrace && extra != 0:
		e.Gate = fmt.Sprintf("the kernel's capability check: the target holds capabilities pyobs lacks (%s) and pyobs has no CAP_SYS_PTRACE", capNames(extra))
		e.Fix = fmt.Sprintf("run as root, or give pyobs CAP_SYS_PTRACE: setcap cap_sys_ptrace+ep %s", exe())
	case !hasPtrace:
		e.Gate = "the kernel's ptrace access check (PTRACE_MODE_ATTACH)"
		e.Fix = "run as root or as the target's user; a setuid or non-dumpable target needs CAP_SYS_PTRACE"
	default:
		e.Gate = "the kernel's ptrace access check (PTRACE_MODE_ATTACH), for a reason pyobs cannot see (checked, and not the cause: " + checked(self, target, terr, scope, extra, tracer, tracedTid) + ")"
		e.Fix = "look for a security module or sandbox between pyobs and the target (an outer container, gVisor, AppArmor, SELinux)"
		if extra != 0 {
			e.Fix = "run pyobs where it holds the target's capabilities and CAP_SYS_PTRACE counts for it (the target's user namespace, e.g. outside the sandbox the target's owner runs in), or " +
				"look for a security module or sandbox between them"
		}
	}
	return e
}

// attaching reports whether op is a ptrace attach (PTRACE_SEIZE, as dump
// --lock and trace's ptrace engine word it), which another tracer refuses;
// a memory read is not refused by one.
func attaching(op string) bool {
	return strings.Contains(op, "PTRACE_SEIZE") || strings.HasPrefix(op, "stop threads")
}

// threadTracer is the tracer of the first of pid's threads that has one
// other than pyobs, and that thread; 0, 0 when none has.
func threadTracer(pid int) (int, int) {
	tids, err := proc().Tasks(pid)
	if err != nil {
		return 0, 0
	}
	for _, tid := range tids {
		if st, err := proc().TaskStatus(pid, tid); err == nil && st.TracerPid > 0 && st.TracerPid != os.Getpid() {
			return st.TracerPid, tid
		}
	}
	return 0, 0
}

// procName is " (comm)" of pid, or "" when unreadable.
func procName(pid int) string {
	st, err := proc().Status(pid)
	if err != nil || st.Name == "" {
		return ""
	}
	return " (" + st.Name + ")"
}

// checked lists what ExplainPtrace looked at before giving up, as facts.
func checked(self, target procfs.Status, terr error, scope int, extra uint64, tracer, tracedTid int) string {
	l := []string{"pyobs holds CAP_SYS_PTRACE"}
	if scope < 0 {
		l = append(l, "no Yama")
	} else {
		l = append(l, fmt.Sprintf("kernel.yama.ptrace_scope=%d", scope))
	}
	l = append(l, "pyobs's Seccomp "+orUnknown(self.Fields["Seccomp"]))
	if terr != nil {
		l = append(l, "the target's status unreadable")
		return strings.Join(l, ", ")
	}
	switch {
	case tracedTid != 0:
		l = append(l, fmt.Sprintf("its thread %d is traced by pid %d", tracedTid, tracer))
	case tracer > 0:
		l = append(l, fmt.Sprintf("the target is traced by pid %d", tracer))
	default:
		l = append(l, "no thread of the target is traced")
	}
	l = append(l, fmt.Sprintf("its Seccomp %s, NoNewPrivs %s", orUnknown(target.Fields["Seccomp"]), orUnknown(target.Fields["NoNewPrivs"])))
	if extra != 0 {
		l = append(l, "but it holds capabilities pyobs lacks: "+capNames(extra))
	}
	return strings.Join(l, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func statusHex(st procfs.Status, key string) uint64 {
	n, _ := strconv.ParseUint(st.Fields[key], 16, 64)
	return n
}

// capNames names the capabilities in a mask (include/uapi/linux/capability.h).
func capNames(mask uint64) string {
	names := []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
		"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
		"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
		"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
		"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON",
		"BPF", "CHECKPOINT_RESTORE"}
	var l []string
	for i := 0; i < 64; i++ {
		if mask&(1<<uint(i)) == 0 {
			continue
		}
		if i < len(names) {
			l = append(l, "CAP_"+names[i])
		} else {
			l = append(l, fmt.Sprintf("capability %d", i))
		}
	}
	return strings.Join(l, " ")
}

func exe() string {
	p, err := os.Executable()
	if err != nil {
		return "pyobs"
	}
	return p
}
