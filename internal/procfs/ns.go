package procfs

import (
	"fmt"
	"os"
)

// InitPidNamespace is the initial pid namespace's link text
// (PROC_PID_INIT_INO, fixed since Linux 3.8).
const InitPidNamespace = "pid:[4026531836]"

// PidNamespace reads /proc/PID/ns/pid: "pid:[INODE]", the same text for
// two processes of one pid namespace.
func (f FS) PidNamespace(pid int) (string, error) {
	return f.readlink(pid, f.pidPath(pid, "ns", "pid"))
}

// SelfPidNamespace is the observer's own pid namespace.
func (f FS) SelfPidNamespace() (string, error) {
	path := f.SelfPath("ns", "pid")
	l, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("can't read link %s: %w", path, err)
	}
	return l, nil
}

// SamePidNamespace reports whether pid lives in the observer's pid
// namespace; false when either link is unreadable (then ids can't be
// checked, and callers keep them as they are).
func (f FS) SamePidNamespace(pid int) (same bool, err error) {
	self, err := f.SelfPidNamespace()
	if err != nil {
		return false, err
	}
	its, err := f.PidNamespace(pid)
	if err != nil {
		return false, err
	}
	return self == its, nil
}

// HostTids maps the thread ids the target knows itself by (its own pid
// namespace's, the innermost NSpid) to ours, from each task's status; nil
// when the target shares our namespace or the links can't be read (then
// ids need no mapping).
func (f FS) HostTids(pid int) map[int]int {
	same, err := f.SamePidNamespace(pid)
	if err != nil || same {
		return nil
	}
	tids, err := f.Tasks(pid)
	if err != nil {
		return nil
	}
	m := make(map[int]int, len(tids))
	for _, tid := range tids {
		st, err := f.TaskStatus(pid, tid)
		if err != nil {
			continue
		}
		if len(st.NSpid) > 1 {
			m[st.NSpid[len(st.NSpid)-1]] = tid
		}
	}
	return m
}
