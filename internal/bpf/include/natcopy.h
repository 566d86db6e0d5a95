// natcopy.h: a thread's user registers and the top of its user stack,
// copied in the kernel for user space to unwind with CFI — CPython built
// without frame pointers has no other way to its C frames. Shared by the
// allocator probes (mem --native) and the sampling walker (record
// --native); internal/bpfload's DecodeNat reads the records.
//
// The including program declares the ring and a per-CPU struct natrec
// scratch (NATCOPY_MAPS), fills the record's head, and calls nat_copy.

#ifndef PYOBS_NATCOPY_H
#define PYOBS_NATCOPY_H

#include "pyobs.h"

// The most user stack one record carries, and the pieces it is read in: a
// read that crosses the end of the stack's mapping fails whole, so the
// copy goes on in smaller pieces up to that end.
#define NAT_STACK 16384
#define NAT_CHUNK 1024
#define NAT_LINKS 32

// x86_64 user registers in the kernel's struct pt_regs order (a uprobe's
// context; what bpf_task_pt_regs points at).
struct uregs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

// One copy: the program's key for it, whose it is, the registers, and the
// stack from sp upward (only the first len bytes are sent).
struct natrec {
	u64 id;     // mem: the copy's id; kwalk: the sample's Python stack hash
	u32 tid;
	u32 len;    // stack bytes that follow
	u32 tgid;
	u32 flags;  // kwalk: the walk's verdict
	u32 kstack; // kwalk: the kernel stack's id + 1, 0: none
	u32 nlinks; // kwalk: entries of links
	u64 ip, sp, bp, bx, r12, r13, r14, r15;
	u64 ax, cx, dx, si, di, r8, r9, r10, r11;
	u64 links[NAT_LINKS]; // kwalk: the Python runs' C-stack links (pywalk.h), innermost first
	u8 stack[NAT_STACK];
};
BTF_KEEP(struct natrec, natrec_type);

#define NATCOPY_MAPS(ring, ring_bytes, buf)                \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_RINGBUF);        \
		__uint(max_entries, ring_bytes);           \
	} ring SEC(".maps");                               \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);   \
		__uint(max_entries, 1);                    \
		__type(key, u32);                          \
		__type(value, struct natrec);              \
	} buf SEC(".maps")

// nat_copy fills r's registers from u and copies up to want bytes of the
// user stack (a multiple of NAT_CHUNK, at most NAT_STACK) from u->sp;
// r->len and the return value are the bytes copied.
static __always_inline u32 nat_copy(struct natrec *r, const struct uregs *u, u32 want)
{
	r->ip = u->ip;
	r->sp = u->sp;
	r->bp = u->bp;
	r->bx = u->bx;
	r->r12 = u->r12;
	r->r13 = u->r13;
	r->r14 = u->r14;
	r->r15 = u->r15;
	r->ax = u->ax;
	r->cx = u->cx;
	r->dx = u->dx;
	r->si = u->si;
	r->di = u->di;
	r->r8 = u->r8;
	r->r9 = u->r9;
	r->r10 = u->r10;
	r->r11 = u->r11;
	u64 sp = u->sp;
	u32 n = 0;
	for (int i = 0; i < NAT_STACK / NAT_CHUNK; i++) {
		if ((i + 1) * NAT_CHUNK > want)
			break;
		if (bpf_probe_read_user(&r->stack[i * NAT_CHUNK], NAT_CHUNK, (void *)(sp + i * NAT_CHUNK)))
			break;
		n = (i + 1) * NAT_CHUNK;
	}
	// The stack's mapping ended inside the next piece: halves up to it.
	if (n < want) {
		for (u32 sz = NAT_CHUNK / 2; sz >= 64; sz /= 2) {
			if (n > NAT_STACK - sz)
				break;
			if (!bpf_probe_read_user(&r->stack[n], sz, (void *)(sp + n)))
				n += sz;
		}
	}
	if (n > NAT_STACK)
		n = NAT_STACK;
	r->len = n;
	return n;
}

// nat_size is the bytes of a record with n stack bytes.
#define nat_size(n) (__builtin_offsetof(struct natrec, stack) + (n))

#endif
