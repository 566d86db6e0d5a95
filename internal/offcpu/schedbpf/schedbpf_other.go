//go:build !(386 || amd64)

package schedbpf

import "errors"

// The program reads x86_64's saved syscall registers; elsewhere the eBPF
// engine is not built and offcpu uses its perf engine.
var ErrUnavailable = errors.New("eBPF engine unavailable: built for x86_64 only")

// Gate says why there is no eBPF engine to load here.
func Gate() string { return "gate: the eBPF engine is built for x86_64 only" }
