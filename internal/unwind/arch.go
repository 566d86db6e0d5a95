package unwind

import (
	"errors"
	"runtime"
)

// ErrArch: the unwinder knows x86_64's registers (DWARF numbering, the
// perf and ptrace register sets) only; other builds say so at run time.
var ErrArch = errors.New("native unwinding is x86_64 only (this build is " + runtime.GOARCH + ")")
