package fallback

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// Want is the engine a user asked for (--engine).
type Want int

const (
	// Auto tries eBPF and, when it is unavailable, runs the fallback
	// and says why.
	Auto Want = iota
	// BPFOnly tries eBPF; when it is unavailable that is the error.
	BPFOnly
	// NoBPF runs the fallback; eBPF is not tried.
	NoBPF
)

// Choose decides "eBPF, else the fallback, and say why". tryBPF loads (or
// loads and runs) the eBPF engine and returns non-nil only when it is
// unavailable — nothing was attached, so the fallback may run instead;
// every other outcome it keeps for its caller. useBPF: eBPF is in use.
// why: tryBPF's refusal when eBPF was tried and is not in use — with Auto
// the fallback's reason (Reason says it in a few words), with BPFOnly the
// caller's error to report.
func Choose(want Want, tryBPF func() error) (useBPF bool, why error) {
	if want == NoBPF {
		return false, nil
	}
	if err := tryBPF(); err != nil {
		return false, err
	}
	return true, nil
}

// Denied reports whether the kernel refused for lack of privilege (EPERM,
// EACCES): the caller names the gate.
func Denied(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// Reason is a load error in a few words: the errno where the kernel
// refused, else its first line (at most 200 bytes).
func Reason(err error) string {
	for _, e := range []error{unix.EPERM, unix.EACCES, unix.ENOMEM, unix.EINVAL, unix.ENOENT} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	r, _, _ := strings.Cut(err.Error(), "\n")
	if len(r) > 200 {
		r = r[:200] + "…"
	}
	return r
}
