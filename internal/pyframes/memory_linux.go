package pyframes

import (
	"errors"
	"os"
	"sync"

	"github.com/pyobs/pyobs/internal/procfs"
	"golang.org/x/sys/unix"
)

// ProcessMemory reads another process with process_vm_readv, falling back to
// /proc/PID/mem when the syscall is refused (e.g. seccomp in a container)
// but the file is readable.
//
// A process whose main thread has exited (while others run on) is read
// through one of its live threads: process_vm_readv of the leader's id
// fails with ESRCH then (procfs/leader.go).
type ProcessMemory struct {
	Pid int
	via int // the thread the reads go through (0: Pid)

	once    sync.Once
	memFile *os.File
	useFile bool
	local   []unix.Iovec // ReadV's buffers, reused: a ProcessMemory is not for concurrent use
	remote  []unix.RemoteIovec
}

// NewProcessMemory returns a reader of pid's address space.
func NewProcessMemory(pid int) *ProcessMemory { return &ProcessMemory{Pid: pid} }

func (m *ProcessMemory) Read(addr uint64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if !m.useFile {
		local := []unix.Iovec{{Base: &p[0], Len: uint64(len(p))}}
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
		n, err := unix.ProcessVMReadv(m.tid(), local, remote, 0)
		if errors.Is(err, unix.ESRCH) && m.reroute() {
			n, err = unix.ProcessVMReadv(m.tid(), local, remote, 0)
		}
		if err == nil && n == len(p) {
			return nil
		}
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) && m.fileWorks() {
			m.useFile = true
		} else {
			if err == nil {
				err = ErrUnmapped // a partial read stops at an unmapped page
			}
			return &MemError{Pid: m.Pid, Addr: addr, Want: len(p), Got: n, Err: err}
		}
	}
	n, err := m.memFile.ReadAt(p, int64(addr))
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = ErrUnmapped
	}
	return &MemError{Pid: m.Pid, Addr: addr, Want: len(p), Got: n, Err: err}
}

func (m *ProcessMemory) tid() int {
	if m.via != 0 {
		return m.via
	}
	return m.Pid
}

// reroute points the reads at a live thread of the process when the one
// they went through is gone; false when none is left (or it is the same).
func (m *ProcessMemory) reroute() bool {
	tid, ok := procfs.Default().LiveTask(m.Pid)
	if !ok || tid == m.tid() {
		return false
	}
	m.via = tid
	return true
}

func (m *ProcessMemory) fileWorks() bool {
	m.once.Do(func() {
		f, err := procfs.Default().OpenMem(m.Pid)
		if err == nil {
			m.memFile = f
		}
	})
	return m.memFile != nil
}

// Close releases the /proc/PID/mem handle if one was opened.
func (m *ProcessMemory) Close() error {
	if m.memFile != nil {
		return m.memFile.Close()
	}
	return nil
}

// maxIov is the kernel's UIO_MAXIOV.
const maxIov = 1024

// ReadV reads all segments with process_vm_readv calls of up to 1024
// segments each. The kernel fills remote segments in order and stops at the
// first unmapped page, so the count of whole segments is exact.
func (m *ProcessMemory) ReadV(segs []Seg) int {
	done := 0
	for done < len(segs) {
		n := min(len(segs)-done, maxIov)
		local, remote := m.local[:0], m.remote[:0]
		want := 0
		for _, g := range segs[done : done+n] {
			if len(g.Buf) == 0 {
				continue
			}
			local = append(local, unix.Iovec{Base: &g.Buf[0], Len: uint64(len(g.Buf))})
			remote = append(remote, unix.RemoteIovec{Base: uintptr(g.Addr), Len: len(g.Buf)})
			want += len(g.Buf)
		}
		m.local, m.remote = local, remote
		got, err := unix.ProcessVMReadv(m.tid(), local, remote, 0)
		if errors.Is(err, unix.ESRCH) && m.reroute() {
			got, err = unix.ProcessVMReadv(m.tid(), local, remote, 0)
		}
		if err != nil && got <= 0 {
			if m.useFile || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
				// Fall back to one read at a time (also covers /proc/PID/mem).
				for i, g := range segs[done:] {
					if m.Read(g.Addr, g.Buf) != nil {
						return done + i
					}
				}
				return len(segs)
			}
			return done
		}
		if got == want {
			done += n
			continue
		}
		// Partial: count whole segments.
		for _, g := range segs[done : done+n] {
			if got < len(g.Buf) {
				return done
			}
			got -= len(g.Buf)
			done++
		}
		return done
	}
	return done
}
