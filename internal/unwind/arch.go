package unwind

import (
	"errors"
	"runtime"
)

// ErrArch: the unwinder knows x86_64's registers (DWARF numbering, the
// perf and ptrace register sets) only; other builds say so at run time.
var ErrArch = errors.New("native unwinding is x86_64 only (this build is " + runtime.GOARCH + ")")

// Supported: this build's registers are the ones the unwinder knows.
const Supported = runtime.GOARCH == "amd64"
