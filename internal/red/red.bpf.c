//go:build ignore

// The kernel half of pyobs red: raw_tp/sys_enter + raw_tp/sys_exit filtered
// by the observed set of processes (procset.h: the target, or its workers
// too). For the socket syscalls a request/response server
// makes (accept, read/recv*, write/send*, sendfile, close, shutdown) it
// keeps the entry time per thread and, at exit, sends one fixed-size event
// (tid, fd, syscall, return value, times, up to PREFIX bytes of the data
// moved) to a ring buffer. Everything else returns after a compare.
//
// x86_64 only: syscall numbers and the pt_regs offsets are that ABI's.
// Kernel types, helpers and map macros: pyobs.h (internal/bpf/include).
//
// Build: make generate (bpf2go); red_bpfel.o is committed.

#include "pyobs.h"
#include "procset.h"

// x86_64 syscall numbers.
#define NR_read 0
#define NR_write 1
#define NR_close 3
#define NR_readv 19
#define NR_writev 20
#define NR_sendfile 40
#define NR_accept 43
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_shutdown 48
#define NR_accept4 288

// struct pt_regs offsets of the argument registers and orig_ax: fixed
// offsets, not CO-RE, so that the program loads without the kernel's BTF.
#define REGS_SI PT_REGS_OFF(si)
#define REGS_DI PT_REGS_OFF(di)
#define REGS_ORIG_AX PT_REGS_OFF(orig_ax)

#define PREFIX 128

struct enter {
	u64 ts;
	u64 buf;  // data pointer, iovec array or msghdr (by nr)
	s32 fd;
	u32 nr;
	u32 kind; // close: EV_KIND (| EV_SOCK), read at the entry (gone at the exit)
	u32 pad;
};

// event.flags
#define EV_NO_ENTER 1 // the entry was not seen (attached mid-call, or map full)
#define EV_PORT 2     // accept: data[0..1] is the listening socket's local port (host order)
#define EV_KIND 4     // the fd's kind was read at the call (close: at the entry, else at the
#define EV_SOCK 8     // exit; not at an accept): EV_SOCK says whether it is a socket
#define S_IFMT 0170000
#define S_IFSOCK 0140000

// Only the fields read (CO-RE, flavoured names: pyobs.h's task_struct
// stays the one the other programs see): the listening socket behind an
// fd, for its port at accept — known at the instant, even for a process
// gone before user space could look at its /proc.
struct sock_common___red {
	u16 skc_num;
} __attribute__((preserve_access_index));
struct sock___red {
	struct sock_common___red __sk_common;
} __attribute__((preserve_access_index));
struct socket___red {
	struct sock___red *sk;
} __attribute__((preserve_access_index));
struct inode___red {
	unsigned short i_mode;
} __attribute__((preserve_access_index));
struct file___red {
	void *private_data;
	struct inode___red *f_inode;
} __attribute__((preserve_access_index));
struct fdtable___red {
	unsigned int max_fds;
	struct file___red **fd;
} __attribute__((preserve_access_index));
struct files_struct___red {
	struct fdtable___red *fdt;
} __attribute__((preserve_access_index));
struct task_struct___red {
	struct files_struct___red *files;
} __attribute__((preserve_access_index));

static u64 (*red_current_task)(void) = (void *)35; // bpf_get_current_task

// fd_file is the current task's open file at fd (0: none, or not read).
static __always_inline struct file___red *fd_file(s32 fd)
{
	struct task_struct___red *t = (struct task_struct___red *)red_current_task();
	struct files_struct___red *files = 0;
	struct fdtable___red *fdt = 0;
	struct file___red **arr = 0, *f = 0;
	unsigned int max = 0;
	if (fd < 0 || bpf_probe_read_kernel(&files, sizeof(files), &t->files) || !files)
		return 0;
	if (bpf_probe_read_kernel(&fdt, sizeof(fdt), &files->fdt) || !fdt)
		return 0;
	if (bpf_probe_read_kernel(&max, sizeof(max), &fdt->max_fds) || (unsigned int)fd >= max)
		return 0;
	if (bpf_probe_read_kernel(&arr, sizeof(arr), &fdt->fd) || !arr)
		return 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &arr[fd]) || !f)
		return 0;
	return f;
}

// fd_kind says whether the current task's fd is a socket now: EV_KIND |
// EV_SOCK, EV_KIND (another file), 0 (not read: no such fd). User space
// learns an fd it has not seen opened from /proc, later: by then the
// number may be another file's (a worker's file read, closed, its number
// taken by an accepted connection), and the kernel's word at the call is
// what tells them apart.
static __always_inline u32 fd_kind(s32 fd)
{
	struct file___red *f = fd_file(fd);
	struct inode___red *ino = 0;
	unsigned short mode = 0;
	if (!f || bpf_probe_read_kernel(&ino, sizeof(ino), &f->f_inode) || !ino ||
	    bpf_probe_read_kernel(&mode, sizeof(mode), &ino->i_mode))
		return 0;
	return (mode & S_IFMT) == S_IFSOCK ? EV_KIND | EV_SOCK : EV_KIND;
}

// listen_port is the local port of the current task's socket fd (0: not
// read). Called at a successful accept's exit: fd is a listening socket.
static __always_inline u16 listen_port(s32 fd)
{
	struct file___red *f = fd_file(fd);
	struct socket___red *so = 0;
	struct sock___red *sk = 0;
	u16 port = 0;
	if (!f)
		return 0;
	if (bpf_probe_read_kernel(&so, sizeof(so), &f->private_data) || !so)
		return 0;
	if (bpf_probe_read_kernel(&sk, sizeof(sk), &so->sk) || !sk)
		return 0;
	bpf_probe_read_kernel(&port, sizeof(port), &sk->__sk_common.skc_num);
	return port;
}

struct event {
	u64 t_enter;
	u64 t_exit;
	s64 ret;
	u32 tid;
	u32 tgid; // the process (one of the set's members)
	s32 fd;
	u32 nr;
	u16 len;  // bytes of data[] that are valid
	u16 flags;
	u8 data[PREFIX];
	u32 pad;
};

BTF_KEEP(struct event, event_type);

// counters index
enum {
	C_EVENTS = 0,
	C_RING_FULL = 1,
	C_ENTER_FULL = 2,
	C_NO_ENTER = 3,
	C_COPY_FAILED = 4,
	C_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct enter);
} enters SEC(".maps");

PERCPU_COUNTERS(counters, C_MAX);

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct raw_args {
	u64 args[2];
};

static __always_inline void count(u32 i)
{
	counter_add(&counters, i, 1);
}

static __always_inline int watched(u64 nr)
{
	switch (nr) {
	case NR_read: case NR_write: case NR_close: case NR_readv: case NR_writev:
	case NR_sendfile: case NR_accept: case NR_sendto: case NR_recvfrom:
	case NR_sendmsg: case NR_recvmsg: case NR_shutdown: case NR_accept4:
		return 1;
	}
	return 0;
}

// ours returns the tid when the current task belongs to the observed set.
static __always_inline u32 ours(void)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!procset_current((u32)(id >> 32)))
		return 0;
	return (u32)id;
}

SEC("raw_tracepoint/sys_enter")
int red_enter(struct raw_args *ctx)
{
	u64 nr = ctx->args[1];
	if (!watched(nr))
		return 0;
	u32 tid = ours();
	if (!tid)
		return 0;
	void *regs = (void *)ctx->args[0];
	struct enter e = {};
	u64 di = 0, si = 0;
	bpf_probe_read_kernel(&di, sizeof(di), regs + REGS_DI);
	bpf_probe_read_kernel(&si, sizeof(si), regs + REGS_SI);
	e.ts = bpf_ktime_get_ns();
	e.fd = (s32)di;
	e.buf = si;
	e.nr = (u32)nr;
	if (nr == NR_close)
		e.kind = fd_kind(e.fd);
	if (bpf_map_update_elem(&enters, &tid, &e, 0) != 0)
		count(C_ENTER_FULL);
	return 0;
}

// data_ptr finds the first buffer of a vectored call (iovec[0] or the
// msghdr's iovec[0]) and clips n to its length.
static __always_inline u64 data_ptr(u32 nr, u64 buf, s64 *n)
{
	u64 iov = buf;
	if (nr == NR_recvmsg || nr == NR_sendmsg) {
		iov = 0;
		bpf_probe_read_user(&iov, sizeof(iov), (void *)(buf + 16)); // msg_iov
	}
	if (nr == NR_readv || nr == NR_writev || nr == NR_recvmsg || nr == NR_sendmsg) {
		u64 v[2] = {};
		if (bpf_probe_read_user(v, sizeof(v), (void *)iov) != 0)
			return 0;
		if ((s64)v[1] < *n)
			*n = (s64)v[1];
		return v[0];
	}
	return buf;
}

SEC("raw_tracepoint/sys_exit")
int red_exit(struct raw_args *ctx)
{
	u32 tid = ours();
	if (!tid)
		return 0;
	void *regs = (void *)ctx->args[0];
	u64 nr = 0;
	bpf_probe_read_kernel(&nr, sizeof(nr), regs + REGS_ORIG_AX);
	if (!watched(nr))
		return 0;
	u64 now = bpf_ktime_get_ns();
	struct enter e = {};
	u16 flags = 0;
	struct enter *pe = bpf_map_lookup_elem(&enters, &tid);
	if (pe && pe->nr == (u32)nr) {
		e = *pe;
		bpf_map_delete_elem(&enters, &tid);
	} else {
		// The arguments are still in the saved user registers.
		u64 di = 0, si = 0;
		bpf_probe_read_kernel(&di, sizeof(di), regs + REGS_DI);
		bpf_probe_read_kernel(&si, sizeof(si), regs + REGS_SI);
		e.fd = (s32)di;
		e.buf = si;
		e.nr = (u32)nr;
		flags |= EV_NO_ENTER;
		count(C_NO_ENTER);
		if (pe)
			bpf_map_delete_elem(&enters, &tid);
	}
	struct event *ev = bpf_ringbuf_reserve(&events, sizeof(struct event), 0);
	if (!ev) {
		count(C_RING_FULL);
		return 0;
	}
	s64 ret = (s64)ctx->args[1];
	ev->t_enter = e.ts;
	ev->t_exit = now;
	ev->ret = ret;
	ev->tid = tid;
	ev->tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	ev->fd = e.fd;
	ev->nr = e.nr;
	ev->len = 0;
	ev->flags = flags;
	ev->pad = 0;
	if (nr == NR_close)
		ev->flags |= (u16)e.kind;
	else if (nr != NR_accept && nr != NR_accept4)
		ev->flags |= (u16)fd_kind(e.fd); // (an accept's returned fd is a socket)
	if (ret >= 0 && (nr == NR_accept || nr == NR_accept4)) {
		u16 port = listen_port(e.fd);
		if (port) {
			ev->data[0] = (u8)port;
			ev->data[1] = (u8)(port >> 8);
			ev->flags |= EV_PORT;
		}
	}
	if (ret > 0 && nr != NR_accept && nr != NR_accept4 && nr != NR_sendfile &&
	    nr != NR_close && nr != NR_shutdown) {
		s64 n = ret;
		u64 p = data_ptr(e.nr, e.buf, &n);
		if (n > PREFIX)
			n = PREFIX;
		if (p && n > 0) {
			u32 sz = (u32)n & (PREFIX * 2 - 1);
			if (sz > PREFIX)
				sz = PREFIX;
			if (bpf_probe_read_user(ev->data, sz, (void *)p) == 0)
				ev->len = (u16)sz;
			else
				count(C_COPY_FAILED);
		}
	}
	count(C_EVENTS);
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
