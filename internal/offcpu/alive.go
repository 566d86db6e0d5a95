package offcpu

import (
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/session"
)

// What the report at the end of a run may no longer be able to read — a
// spawned program (-- CMD) has usually ended by then — is learned while the
// target lives: thread names (session.ThreadNamer: with --threads as
// often as threads come and go, else once a second), and (bpf engine) the
// mappings that native frames are symbolized with, once a second (a maps
// read is one /proc file).
const learnEvery = time.Second

// name is a thread's Python name as last read while it lived ("" when
// never known).
func (e *engine) name(tid int) string {
	if pid, _, name := e.memberThread(tid); pid != 0 {
		return name
	}
	return e.namer.Name(session.ThreadGen{Tid: tid, Gen: e.namer.Gen(tid)})
}

// lookNames reads the target's thread names when due and relabels the
// roots of the threads named since (their earlier waits included).
func (e *engine) lookNames() {
	now := time.Now()
	for _, k := range e.namer.Look(now) {
		e.roots.Relabel(flame.ThreadKey{Tid: k.Tid, Gen: k.Gen}, e.namer.Name(k))
	}
	e.memberNames.Look(now, func(pid int, k session.ThreadGen, name string) {
		e.roots.Relabel(flame.ThreadKey{Pid: pid, Tid: k.Tid, Gen: k.Gen}, name)
	})
}
