//go:build ignore

// The kernel half of pyobs mem's probe engine: uprobes on the
// interpreter's allocator entry points (PyObject_Malloc/Calloc/Realloc and
// PyMem_Malloc/Calloc/Realloc) decide at the call whether to track it —
// with probability size/sample_bytes, every call of sample_bytes or more —
// and walk the calling thread's Python stack (pywalk.h) when they do; the
// uretprobes on the same functions take the returned pointer and keep
// ptr -> {size, estimate, stack, time} in `live`; the uprobes on
// PyObject_Free/PyMem_Free delete it. Each distinct Python stack is sent
// once to user space through `pystacks`. What lives in `live` when the
// window ends is what was allocated in the window and not freed.
//
// With native_bytes set (pyobs mem --native), a tracked call also copies
// the calling thread's registers and up to native_bytes of its user stack
// from the stack pointer up (struct natrec) through `natstacks`, under an
// id kept with the allocation: user space unwinds it with the CFI of the
// mapped files (the interpreter has no frame pointers) and glues the Python
// stack in at each eval-loop frame. Untracked calls copy nothing.
//
// Build: make generate (bpf2go + clang -target bpf); the object is committed.

#include "pywalk.h"
#include "natcopy.h"

static u32 (*bpf_get_prandom_u32)(void) = (void *)7;

// A call on its way: its size and, when tracked, its estimate and stack.
struct pend {
	u64 size;
	u64 est;   // bytes this allocation stands for (size / probability)
	u64 stack; // the Python stack's hash, 0: none walked
	u64 ts;
	u64 nat;   // the native stack copy's id (struct natrec), 0: none sent
	u64 nest;  // probed calls made inside this one (realloc -> malloc) not returned yet
};

// A tracked call's note older than this at the thread's next call was
// never returned from (a longjmp, a thread that died in it): replaced.
#define PEND_STALE_NS (10 * 1000 * 1000ULL)

// A live tracked allocation (the key: its address).
struct live {
	u64 size;
	u64 est;
	u64 stack;
	u64 ts;  // CLOCK_MONOTONIC ns of the allocation
	u64 nat; // its native stack copy's id, 0: none
};

enum {
	C_CALLS = 0,     // allocator calls of the target (entries)
	C_TRACKED,       // calls chosen by the sampling
	C_LIVE_ADDED,    // tracked allocations put in the live map
	C_FREES,         // free calls of the target with a non-NULL pointer
	C_FREED,         // frees of tracked allocations
	C_NULL,          // tracked calls that returned NULL
	C_DROP_PEND,     // pending map full: the call is lost
	C_DROP_LIVE,     // live map full: a tracked allocation is lost
	C_DROP_LIVE_EST, // its estimated bytes
	C_REPLACED,      // a live entry's address returned again (freed where no probe sees)
	C_UNPAIRED,      // a return without its entry (attached mid-call)
	C_LIVE_EST,      // estimated bytes live (added at track, subtracted at free; may wrap per CPU)
	C_LIVE_N,        // tracked allocations live
	C_PY_WALKED,
	C_PY_TRUNC,
	C_PY_FAULT,
	C_PY_INVALID,
	C_PY_NOPY,
	C_PY_EMPTY,
	C_PY_NEW,  // distinct stacks sent to user space
	C_PY_LOST, // pystacks ring full: a stack not sent (its allocations unnamed)
	C_NAT_SENT,  // native stack copies sent
	C_NAT_LOST,  // natstacks ring full: a copy not sent (its allocations without native frames)
	C_NAT_BYTES, // stack bytes copied, summed over the copies sent
	C_NCOUNTERS,
};

PERCPU_COUNTERS(counters, C_NCOUNTERS);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct pend);
} pending SEC(".maps");

// Bounded: what does not fit is counted (C_DROP_LIVE), never grown.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, u64);
	__type(value, struct live);
} lives SEC(".maps");

// Stacks already sent, by hash, and the ring of new ones (pywalk.h).
PYWALK_SEND_MAPS(pyseen, pystacks, 1 << 21);

// enter's note for the return, built here (see enter).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct pend);
} pendbuf SEC(".maps");

// The native copies: one per tracked call (user space sizes the ring; a
// page when native_bytes is 0), built in a per-CPU scratch record.
NATCOPY_MAPS(natstacks, 1 << 23, natbuf);

// Per-CPU sequence of the copies: an id is (seq << 16 | cpu), never 0.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} natseq SEC(".maps");


const volatile u32 target_tgid = 0;
// Track a call of size s with probability s/sample_bytes (1: every call).
const volatile u64 sample_bytes = 1;
// 1: the probed functions are pymalloc's hook targets, whose first
// argument is the allocator's context (void *ctx, size_t size): every
// argument is one register further.
const volatile u8 hook_abi = 0;
// Bytes of user stack copied per tracked call (0: no native stacks; at
// most NAT_STACK, a multiple of NAT_CHUNK).
const volatile u32 native_bytes = 0;

// arg is the call's i-th argument (0-based, after the context).
static __always_inline u64 arg(struct uregs *ctx, int i)
{
	// Loaded at fixed offsets first: the verifier refuses a computed
	// offset into the context.
	u64 di = ctx->di, si = ctx->si, dx = ctx->dx;
	if (hook_abi)
		return i == 0 ? si : dx;
	return i == 0 ? di : si;
}

// The end of the window (CLOCK_MONOTONIC), set by user space: calls after
// it change nothing, so the maps hold the state at that instant.
volatile u64 stop_ns = 0;

static __always_inline void count(u32 slot, u64 n)
{
	counter_add(&counters, slot, n);
}

// ours: the target's thread, inside the window. tid is set.
static __always_inline int ours(u32 *tid, u64 *now)
{
	u64 pt = bpf_get_current_pid_tgid();
	if ((u32)(pt >> 32) != target_tgid)
		return 0;
	*now = bpf_ktime_get_ns();
	u64 stop = stop_ns;
	if (stop && *now >= stop)
		return 0;
	*tid = (u32)pt;
	return 1;
}

static __always_inline void forget(u64 ptr)
{
	struct live *l = bpf_map_lookup_elem(&lives, &ptr);
	if (!l)
		return;
	count(C_FREED, 1);
	count(C_LIVE_EST, -l->est);
	count(C_LIVE_N, -1ULL);
	bpf_map_delete_elem(&lives, &ptr);
}

// native_send copies the thread's registers and user stack at the probe
// and sends them; it returns the copy's id, 0 when none was sent.
static __always_inline u64 native_send(struct uregs *ctx, u32 tid)
{
	u32 zero = 0;
	struct natrec *r = bpf_map_lookup_elem(&natbuf, &zero);
	u64 *seq = bpf_map_lookup_elem(&natseq, &zero);
	if (!r || !seq)
		return 0;
	*seq += 1;
	u64 id = *seq << 16 | (bpf_get_smp_processor_id() & 0xffff);
	r->id = id;
	r->tid = tid;
	r->tgid = r->flags = r->kstack = r->nlinks = 0;
	u32 n = nat_copy(r, ctx, native_bytes);
	if (bpf_ringbuf_output(&natstacks, r, nat_size(n), 0)) {
		count(C_NAT_LOST, 1);
		return 0;
	}
	count(C_NAT_SENT, 1);
	count(C_NAT_BYTES, n);
	return id;
}

// enter decides whether the call of size bytes is tracked and notes it
// for the return either way (the return must not take an older note).
static __always_inline void enter(struct uregs *ctx, u32 tid, u64 now, u64 size)
{
	count(C_CALLS, 1);
	struct pend *out = bpf_map_lookup_elem(&pending, &tid);
	if (out && out->est && now - out->ts < PEND_STALE_NS) {
		// A call made inside a tracked one (pymalloc's realloc calls its
		// malloc): its block is the outer call's business; its return
		// must not take the outer's note.
		out->nest++;
		return;
	}
	struct pend p = {.size = size, .ts = now};
	u64 n = sample_bytes;
	if (n <= 1 || size >= n) {
		p.est = size;
	} else if (size > 0 && (u64)bpf_get_prandom_u32() * n < (size << 32)) {
		p.est = n; // size / (size/n)
	}
	if (!p.est) {
		bpf_map_delete_elem(&pending, &tid);
		return;
	}
	count(C_TRACKED, 1);
	// The note is built in per-CPU scratch, not on the stack: the walk's
	// global function (pywalk_chain) and its loop callback stack their
	// frames on this program's, within the verifier's 512 bytes.
	u32 zero = 0;
	struct pend *q = bpf_map_lookup_elem(&pendbuf, &zero);
	if (!q)
		return;
	*q = p;
	u64 stack = pywalk_send(tid, now, 0, &pyseen, &pystacks, 0, &counters, C_PY_WALKED);
	u64 nat = native_bytes ? native_send(ctx, tid) : 0;
	q = bpf_map_lookup_elem(&pendbuf, &zero);
	if (!q)
		return;
	q->stack = stack;
	q->nat = nat;
	if (bpf_map_update_elem(&pending, &tid, q, BPF_ANY))
		count(C_DROP_PEND, 1);
}

SEC("uprobe")
int alloc_enter(struct uregs *ctx)
{
	u32 tid;
	u64 now;
	if (ours(&tid, &now))
		enter(ctx, tid, now, arg(ctx, 0));
	return 0;
}

SEC("uprobe")
int calloc_enter(struct uregs *ctx)
{
	u32 tid;
	u64 now;
	if (!ours(&tid, &now))
		return 0;
	u64 a = arg(ctx, 0), b = arg(ctx, 1);
	u64 size = 0;
	if (!(a >> 32) && !(b >> 32))
		size = a * b; // else beyond any real request: counted as 0 bytes
	enter(ctx, tid, now, size);
	return 0;
}

// realloc(ptr, size): the old block is gone (moved or resized in place:
// either way its growth is now the new call's).
SEC("uprobe")
int realloc_enter(struct uregs *ctx)
{
	u32 tid;
	u64 now;
	if (!ours(&tid, &now))
		return 0;
	u64 old = arg(ctx, 0);
	if (old)
		forget(old);
	enter(ctx, tid, now, arg(ctx, 1));
	return 0;
}

SEC("uretprobe")
int alloc_exit(struct uregs *ctx)
{
	u32 tid;
	u64 now;
	if (!ours(&tid, &now))
		return 0;
	struct pend *p = bpf_map_lookup_elem(&pending, &tid);
	if (!p)
		return 0;
	if (p->nest) {
		p->nest--; // a call inside the tracked one returned
		return 0;
	}
	struct live l = {.size = p->size, .est = p->est, .stack = p->stack, .ts = p->ts, .nat = p->nat};
	bpf_map_delete_elem(&pending, &tid);
	u64 ptr = ctx->ax;
	if (!ptr) {
		count(C_NULL, 1);
		return 0;
	}
	struct live *old = bpf_map_lookup_elem(&lives, &ptr);
	if (old) {
		count(C_REPLACED, 1);
		count(C_LIVE_EST, -old->est);
		count(C_LIVE_N, -1ULL);
	}
	if (bpf_map_update_elem(&lives, &ptr, &l, BPF_ANY)) {
		count(C_DROP_LIVE, 1);
		count(C_DROP_LIVE_EST, l.est);
		return 0;
	}
	count(C_LIVE_ADDED, 1);
	count(C_LIVE_EST, l.est);
	count(C_LIVE_N, 1);
	return 0;
}

SEC("uprobe")
int free_enter(struct uregs *ctx)
{
	u32 tid;
	u64 now;
	if (!ours(&tid, &now))
		return 0;
	u64 ptr = arg(ctx, 0);
	if (!ptr)
		return 0;
	count(C_FREES, 1);
	forget(ptr);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
