//go:build amd64

package offcpu

import (
	"time"

	"github.com/pyobs/pyobs/internal/unwind"
)

// learnBPF is learn for the bpf engine, which also keeps the target's
// mappings fresh for userFrame's symbols.
func (e *bpfEngine) learnBPF() {
	if time.Since(e.learnAt) < learnEvery {
		return
	}
	e.learnAt = time.Now()
	if e.uproc == nil {
		e.uproc = unwind.NewProcess(e.s.Pid, unwind.NewCache())
	}
	_ = e.uproc.Refresh() // the target gone: the last maps stay
}
