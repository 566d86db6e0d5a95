package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Path names a file of pid under the mount (Path(42, "maps") is
// /proc/42/maps on the live system), for messages and for the few callers
// that must hand a path to someone else.
func (f FS) Path(pid int, elem ...string) string { return f.pidPath(pid, elem...) }

func (f FS) pidPath(pid int, elem ...string) string {
	return filepath.Join(append([]string{f.root, strconv.Itoa(pid)}, elem...)...)
}

func (f FS) taskPath(pid, tid int, elem ...string) string {
	return filepath.Join(append([]string{f.root, strconv.Itoa(pid), "task", strconv.Itoa(tid)}, elem...)...)
}

// SelfPath names a file of the observer itself (self/…).
func (f FS) SelfPath(elem ...string) string {
	return filepath.Join(append([]string{f.root, "self"}, elem...)...)
}

// SelfExe is the path that re-executes the observer's own binary (self/exe),
// whatever its name or whether it was replaced on disk.
func (f FS) SelfExe() string { return f.SelfPath("exe") }

// ExePath is /proc/PID/exe: the process's executable (a link to read or a
// file to open; it can be the dynamic loader when a program was started
// through it).
func (f FS) ExePath(pid int) string { return f.pidPath(f.via(pid), "exe") }

// CwdPath is /proc/PID/cwd (exe and cwd go through a live thread when the
// main thread has exited: its own links are gone).
func (f FS) CwdPath(pid int) string { return f.pidPath(f.via(pid), "cwd") }

// SmapsRollupPath is /proc/PID/smaps_rollup, through a live thread when
// the main thread has exited (the leader's own is empty then).
func (f FS) SmapsRollupPath(pid int) string { return f.pidPath(f.via(pid), "smaps_rollup") }

// Exe reads the exe link.
func (f FS) Exe(pid int) (string, error) { return f.readlink(pid, f.ExePath(pid)) }

// Cwd reads the cwd link.
func (f FS) Cwd(pid int) (string, error) { return f.readlink(pid, f.CwdPath(pid)) }

func (f FS) readlink(pid int, path string) (string, error) {
	l, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("pid %d: can't read link %s: %w", pid, path, err)
	}
	return l, nil
}

// RootPath is p as the process sees it: under /proc/PID/root, so through
// its root directory and mount namespace (a container's files); through a
// live thread when the main thread has exited (its root is gone).
func (f FS) RootPath(pid int, p string) string {
	return f.pidPath(f.via(pid), "root") + filepath.Clean("/"+p)
}

// via is the id under which pid's memory and files are reached (LiveTask;
// pid itself when none is alive, for the error to name it).
func (f FS) via(pid int) int {
	if tid, ok := f.LiveTask(pid); ok {
		return tid
	}
	return pid
}

// MapFilePath is /proc/PID/map_files/START-END: the very file a mapping
// maps, right even when its path was replaced, deleted or lies in another
// mount namespace (needs CAP_SYS_ADMIN, or CAP_CHECKPOINT_RESTORE).
func (f FS) MapFilePath(pid int, start, end uint64) string {
	return f.pidPath(f.via(pid), "map_files", fmt.Sprintf("%x-%x", start, end))
}

// OpenMem opens /proc/PID/mem for reading (ReadAt at a target address):
// the fallback where process_vm_readv is refused, and the way to read
// what process_vm_readv cannot (the [vvar]/[vdso] pages).
func (f FS) OpenMem(pid int) (*os.File, error) {
	path := f.pidPath(f.via(pid), "mem")
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't open %s: %w", pid, path, err)
	}
	return fh, nil
}

// Exists reports whether pid has an entry (a zombie still has one).
func (f FS) Exists(pid int) bool {
	_, err := os.Stat(f.pidPath(pid))
	return err == nil
}

// TaskExists reports whether tid is still a thread of pid.
func (f FS) TaskExists(pid, tid int) bool {
	_, err := os.Stat(f.taskPath(pid, tid))
	return err == nil
}

// Owner is the effective uid owning /proc/PID (the process's euid, or
// root's for a non-dumpable process).
func (f FS) Owner(pid int) (int, error) {
	path := f.pidPath(pid)
	fi, err := os.Stat(path)
	if err != nil {
		return -1, fmt.Errorf("pid %d: can't stat %s: %w", pid, path, err)
	}
	uid, ok := ownerUID(fi)
	if !ok {
		return -1, fmt.Errorf("pid %d: %s has no owner", pid, path)
	}
	return uid, nil
}

// Label names a per-process file for people, whatever the mount:
// Label("io") is "/proc/PID/io".
func Label(elem ...string) string { return "/proc/PID/" + strings.Join(elem, "/") }

// Cgroup reads /proc/PID/cgroup as the kernel wrote it (one
// "id:controllers:path" line per hierarchy).
func (f FS) Cgroup(pid int) ([]byte, error) {
	p := f.pidPath(pid, "cgroup")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("can't read %s: %w", p, err)
	}
	return b, nil
}
