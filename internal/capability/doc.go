// Package capability probes, in one place, the kernel gates that decide what
// pyobs may do to another process: Yama's ptrace_scope, perf_event_paranoid,
// the caller's capabilities (CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF,
// CAP_SYS_ADMIN), BTF and tracefs. A refused operation is explained by a
// *GateError naming the gate and the fix; every eBPF engine words its gate
// with BPFGate (through internal/bpfload).
//
// ExplainPtrace names only a gate it checked (the caller's CAP_SYS_PTRACE and
// seccomp filter, Yama, the target's owner, tracer and capabilities); when
// none explains a refusal it says that the kernel refused and lists what was
// checked, never a guess.
//
// Price: a few small reads of /proc (status files, sysctls) when asked.
// Truth it reads: /proc/self/status, /proc/PID/status, /proc/sys.
// Cannot see: LSM policies (AppArmor, SELinux), a sandbox's own checks
// (gVisor), a target's dumpable flag: a refusal by those is reported as
// "for a reason pyobs cannot see".
package capability
