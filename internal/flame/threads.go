package flame

import "strconv"

// ThreadKey is one thread of a recording: its process (0: the target; a
// set's other members by pid), its TID, and the how-manieth thread that
// TID was given to during it (0: the first), so that a TID the kernel
// reuses does not put a new thread under an old one's root.
type ThreadKey struct{ Pid, Tid, Gen int }

// ThreadLabel is a thread root's label: "NAME (TID)", or "thread TID" when
// its name is not known.
func ThreadLabel(tid int, name string) string {
	if name == "" {
		return "thread " + strconv.Itoa(tid)
	}
	return name + " (" + strconv.Itoa(tid) + ")"
}

// ThreadRoots gives each thread of a recording one root frame, labelled
// with what is known of its name when first used and relabelled in place
// as names are learned: all of a thread's samples are under one root,
// whenever its name was read.
type ThreadRoots struct {
	p   *Profile
	ids map[ThreadKey]int
}

// NewThreadRoots keeps thread roots in p.
func NewThreadRoots(p *Profile) *ThreadRoots {
	return &ThreadRoots{p: p, ids: map[ThreadKey]int{}}
}

// ID is k's root frame (name "" when not known yet).
func (t *ThreadRoots) ID(k ThreadKey, name string) int {
	if id, ok := t.ids[k]; ok {
		return id
	}
	// Addr holds the process and the generation: two threads given one
	// TID stay two frames even when their labels are the same.
	id := t.p.Intern(Frame{Kind: Thread, Function: ThreadLabel(k.Tid, name), Addr: uint64(k.Pid)<<32 | uint64(uint32(k.Gen))})
	t.ids[k] = id
	return id
}

// Relabel names k's root, if it has one ("": not known, the label stays).
func (t *ThreadRoots) Relabel(k ThreadKey, name string) {
	id, ok := t.ids[k]
	if !ok || name == "" {
		return
	}
	f := t.p.Frame(id)
	if l := ThreadLabel(k.Tid, name); l != f.Function {
		f.Function = l
		t.p.Rename(id, f)
	}
}
