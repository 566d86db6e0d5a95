//go:build amd64

package offcpu

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
)

// TestBPFClassOf: the wait class from the kernel's hints (syscall and GIL
// bit at the switch-out, state, kernel stack) through Classify.
func TestBPFClassOf(t *testing.T) {
	e := &bpfEngine{engine: &engine{gilLo: 0x1000, gilHi: 0x2000}}
	regs := uint32(schedbpf.FlagRegs)
	read := &pyRec{class: ClassOther}
	for _, c := range []struct {
		name  string
		k     schedbpf.Wkey
		stack []string
		rec   *pyRec
		want  string
	}{
		{"preempted", schedbpf.Wkey{Flags: schedbpf.FlagRunQueue}, []string{"irqentry_exit_to_user_mode"}, nil, ClassRunQueue},
		{"futex on the GIL", schedbpf.Wkey{Flags: regs | schedbpf.FlagGIL, Sysnr: unix.SYS_FUTEX}, []string{"futex_wait"}, nil, ClassGIL},
		{"futex elsewhere", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_FUTEX}, []string{"futex_wait"}, nil, ClassLock},
		{"hints beat a procfs read", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_CLOCK_NANOSLEEP}, nil, read, ClassSleep},
		{"pipe read", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_READ}, []string{"do_syscall_64", "ksys_read", "vfs_read", "anon_pipe_read"}, nil, ClassPipe},
		{"socket read", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_READ}, []string{"vfs_read", "sock_read_iter", "unix_stream_recvmsg"}, nil, ClassNet},
		{"epoll", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_EPOLL_WAIT}, []string{"ep_poll"}, nil, ClassNet},
		{"D state", schedbpf.Wkey{Flags: regs | schedbpf.FlagD, Sysnr: unix.SYS_READ}, []string{"filemap_read", "folio_wait_bit_common", "io_schedule"}, nil, ClassDisk},
		{"vfork in D: the child's exec", schedbpf.Wkey{Flags: schedbpf.FlagD, Sysnr: -1}, []string{"do_syscall_64", "__x64_sys_vfork", "kernel_clone", "wait_for_completion_state"}, nil, ClassOther},
		{"no regs: syscall from the stack", schedbpf.Wkey{Sysnr: -1}, []string{"do_syscall_64", "__x64_sys_clock_nanosleep", "hrtimer_nanosleep"}, nil, ClassSleep},
		{"no regs: futex is a lock", schedbpf.Wkey{Sysnr: -1}, []string{"__x64_sys_futex", "futex_wait"}, nil, ClassLock},
		{"no regs: the procfs read decides", schedbpf.Wkey{Sysnr: -1}, []string{"__x64_sys_futex"}, &pyRec{class: ClassGIL}, ClassGIL},
		{"before the attach, unread", schedbpf.Wkey{Flags: schedbpf.FlagBefore, Sysnr: -1}, nil, nil, ""},
		{"before the attach, read", schedbpf.Wkey{Flags: schedbpf.FlagBefore, Sysnr: -1}, nil, &pyRec{class: ClassPipe}, ClassPipe},
		{"nothing known", schedbpf.Wkey{Sysnr: -1}, nil, nil, ""},
		{"stopped in a futex call", schedbpf.Wkey{Flags: regs | schedbpf.FlagStopped, Sysnr: unix.SYS_FUTEX}, []string{"get_signal", "do_signal_stop"}, nil, ClassStopped},
		{"stop flag beats a procfs read", schedbpf.Wkey{Flags: schedbpf.FlagStopped, Sysnr: -1}, nil, read, ClassStopped},
		{"no flag: the stop from the stack", schedbpf.Wkey{Flags: regs, Sysnr: unix.SYS_CLOCK_NANOSLEEP}, []string{"arch_do_signal_or_restart", "get_signal", "do_signal_stop"}, nil, ClassStopped},
		{"ptrace stop from the stack", schedbpf.Wkey{Sysnr: -1}, []string{"ptrace_signal", "ptrace_stop"}, nil, ClassStopped},
		{"before the attach, read stopped", schedbpf.Wkey{Flags: schedbpf.FlagBefore, Sysnr: -1}, nil, &pyRec{class: ClassStopped}, ClassStopped},
	} {
		if got := e.classOf(c.k, c.stack, c.rec); got != c.want {
			t.Errorf("%s: class %q, want %q", c.name, got, c.want)
		}
	}
}
