package capability

import (
	"errors"
	"fmt"
	"strconv"
)

// BPFGate names what decides whether this process may load eBPF programs
// and where it stands: the capabilities (CAP_BPF and CAP_PERFMON, or
// CAP_SYS_ADMIN on kernels before 5.8) and kernel.unprivileged_bpf_disabled.
// The one wording every eBPF engine uses, in its errors and its fallback
// notes.
func BPFGate() string {
	unpriv := "unknown"
	if n, ok := sysctl("kernel/unprivileged_bpf_disabled"); ok {
		unpriv = strconv.Itoa(n)
	}
	caps := Effective()
	held := func(c int) string {
		if caps&(1<<uint(c)) != 0 {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("the BPF gate (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN; held: CAP_BPF %s, CAP_PERFMON %s, CAP_SYS_ADMIN %s; kernel.unprivileged_bpf_disabled=%s)",
		held(CapBPF), held(CapPerfmon), held(CapSysAdmin), unpriv)
}

// ExplainBPF is the GateError of a refused eBPF load or attach (EPERM or
// EACCES without a verifier log): op says what was asked ("load trace's
// BPF programs"). errors.Is(err, ErrPermission) and the errno still match.
func ExplainBPF(op string, cause error) *GateError {
	return &GateError{Op: op, Gate: BPFGate(),
		Fix: fmt.Sprintf("run pyobs as root, or grant it CAP_BPF and CAP_PERFMON: setcap cap_bpf,cap_perfmon+ep %s", exe()),
		Err: errors.Join(ErrPermission, cause)}
}
