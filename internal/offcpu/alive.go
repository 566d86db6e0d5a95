package offcpu

import "time"

// What the report at the end of a run may no longer be able to read — a
// spawned program (-- CMD) has usually ended by then — is learned while the
// target lives: thread names, and (bpf engine) the mappings that native
// frames are symbolized with. At most once a second: a name read walks
// every thread state, a maps read is one /proc file.
const learnEvery = time.Second

// learned is what was read of the target while it lived.
type learned struct {
	names map[int]string // tid → Python thread name
	at    time.Time
}

// name is a thread's Python name: read now, else as last read while the
// target lived ("" when never known).
func (e *engine) name(tid int) string {
	if e.learned.names == nil {
		e.learned.names = map[int]string{}
	}
	if n := e.liveName(tid); n != "" {
		e.learned.names[tid] = n
		return n
	}
	return e.learned.names[tid]
}

// learn reads the names of the threads not named yet, once per learnEvery.
func (e *engine) learn(tids []int) bool {
	if time.Since(e.learned.at) < learnEvery {
		return false
	}
	e.learned.at = time.Now()
	for _, tid := range tids {
		if e.learned.names[tid] == "" {
			e.name(tid)
		}
	}
	return true
}
