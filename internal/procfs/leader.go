package procfs

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A process whose main thread ended (pthread_exit) while others run on
// keeps its leader as a zombie: /proc/PID/stat says Z, and the leader's
// files that go through its memory or its filesystem (maps, mem, root,
// map_files, status's Vm lines) are empty or refused; process_vm_readv of
// PID fails with ESRCH. The process is alive until its last thread ends,
// and a live thread's id reads all of it (/proc/TID/… is the process's).

// LiveTask is the thread to read pid through: pid itself when its leader
// is alive, else one of its threads that is not a zombie; ok is
// false when no thread of pid is alive (or pid is gone).
func (f FS) LiveTask(pid int) (tid int, ok bool) {
	var buf [512]byte
	b, err := readSmallAt(unix.AT_FDCWD, f.pidPath(pid, "stat"), buf[:])
	if err != nil {
		return 0, false
	}
	if _, state, err := statCommState(b); err != nil || !deadState(state) {
		return pid, err == nil
	}
	return f.liveThread(pid)
}

// liveThread is a thread of pid other than its leader that is not a
// zombie.
func (f FS) liveThread(pid int) (int, bool) {
	ents, err := os.ReadDir(f.pidPath(pid, "task"))
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		if f.TaskLives(pid, tid) {
			return tid, true
		}
	}
	return 0, false
}

// TaskLives says whether thread tid of pid runs on: there, and neither a
// zombie nor dead.
func (f FS) TaskLives(pid, tid int) bool {
	state, err := f.stateLetter(pid, tid)
	return err == nil && !deadState(state)
}

// TaskEnded says whether thread tid of pid has ended: a zombie, dead, or
// gone from /proc. Any other failure to read its state says nothing
// (false).
func (f FS) TaskEnded(pid, tid int) bool {
	state, err := f.stateLetter(pid, tid)
	if err != nil {
		return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
	}
	return deadState(state)
}

// TaskStopped is thread tid of pid's state when someone else stopped it
// (T: job control, t: a tracer), else "" (running, sleeping, or unread).
func (f FS) TaskStopped(pid, tid int) string {
	state, err := f.stateLetter(pid, tid)
	if err == nil && (state == "T" || state == "t") {
		return state
	}
	return ""
}

// stateLetter is the state of thread tid of pid, from its stat file alone
// (TaskState reads two more).
func (f FS) stateLetter(pid, tid int) (string, error) {
	var buf [512]byte
	b, err := readSmallAt(unix.AT_FDCWD, f.taskPath(pid, tid, "stat"), buf[:])
	if err != nil {
		return "", err
	}
	_, state, err := statCommState(b)
	return state, err
}

func deadState(s string) bool { return s == "Z" || s == "X" }

// Tgid is the process that tid is a thread of (tid itself for a process's
// leader).
func (f FS) Tgid(tid int) (int, error) {
	st, err := f.Status(tid)
	if err != nil {
		return 0, err
	}
	if st.Tgid <= 0 {
		return tid, nil
	}
	return st.Tgid, nil
}
