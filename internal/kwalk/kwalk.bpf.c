//go:build ignore

// pyobs kwalk: walk the current thread's CPython stack in the kernel, at
// the instant of a sampling event (perf_event program on task-clock or
// cpu-clock, one event per CPU, filtered here by tgid, or by the members
// of a process set: procset.h).
//
// Per sample: find the thread state (a map filled by user space, keyed by
// the kernel tid, else by the thread's fsbase == pthread_self), take its
// top frame, follow `previous` with bpf_loop, and for every Python frame
// record the code object address and the instruction offset (lasti).
// Shims are skipped; the walk's verdict says whether the chain ended at
// the version's outermost marker. Each sample goes to a ring buffer.
//
// Layout offsets come from user space (internal/pyframes: the
// _Py_DebugOffsets table on 3.13+, per-version tables before) in the
// read-only `cfg`, fixed at load: the verifier sees them as constants.
// A command held before its exec is sampled from its first instruction,
// its samples counted as S_PREPY until its interpreter is up: kwalklate,
// the same source with PYWALK_ADDRS_LATE, when user space read the
// layout from the command's files (only the process's addresses come
// after the load); kwalkheld, with PYWALK_CFG_MUTABLE, when it could
// not (the whole configuration after the load: a verifier exploring
// every version, a longer load).
//
// Build: make generate (bpf2go + clang -target bpf, -I internal/bpf/include);
// the object is committed.

// The walk itself (layout config, maps, frame steps, verdict) is in
// internal/bpf/include/pywalk.h, shared with offcpu's switch-out.

// Ticks can land in 3.11/3.12's eval-loop entry (pywalk.h).
#define PYWALK_ENTRY_RESTART
#include "pywalk.h"
#include "procset.h"
#include "natcopy.h"

// Counter slots (per CPU; user space sums them).
enum {
	C_SAMPLES = 0, // events of the target's threads
	C_WALKED,      // complete walks
	C_TRUNCATED,
	C_FAULTED,
	C_INVALID,
	C_NOPY,        // no thread state
	C_EMPTY,       // thread state without a frame
	C_LOST,        // ring buffer full: sample dropped
	C_FSKEY,       // thread state found by fsbase
	C_BYTLS,       // thread state found through the thread's TLS/TSD
	C_TLSBAD,      // a TLS/TSD candidate that failed its check
	C_MAPSTALE,    // a map entry whose thread state belongs to another thread
	C_AGGFULL,     // aggregating: the count map was full, the sample not counted
	C_KSTACK,      // kernel stacks taken (samples in kernel mode, kstacks on)
	C_KLOST,       // a kernel-mode sample whose stack did not fit the map (bucket taken)
	C_NATSENT,     // native_bytes: samples sent with their native stack copy
	C_NATLOST,     // native_bytes: the natstacks ring was full, the sample lost
	C_NATBYTES,    // native_bytes: stack bytes copied, summed
	C_PREPY,       // before the walk was configured (a held command's interpreter not up yet)
	C_CCHIT,       // aggregating: samples counted in their CPU's count cache (no hash map)
	C_CCRACED,     // aggregating: samples whose cache write crossed a drain (raced)
	C_NCOUNTERS,
};

// A sample taken before the walk was configured (PW_READY 0: only in
// kwalklate and kwalkheld, for a command held before its exec): counted,
// not walked.
#define S_PREPY 0x100

// ---- Maps ----

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} samples SEC(".maps");

PERCPU_COUNTERS(counters, C_NCOUNTERS);

// Aggregation (aggregate != 0): instead of every sample, the ring carries
// each distinct stack once (`sent` remembers which; an evicted one is sent
// again), and each sample adds one to its (stack, thread, verdict) count
// in one of two maps — the one the generation in `sel` names (its low
// bit); user space moves `sel` on, lets the programs on the old map
// finish, then reads and empties it: no count is added to an entry being
// deleted.
const volatile u32 aggregate = 0;

struct count_key {
	u64 id; // the stack's hash (0: no frames walked)
	u32 tgid;
	u32 tid;
	u32 flags; // the walk's verdict (S_COMPLETE … S_EMPTY)
	u32 kstack; // kstacks on: the kernel stack's id + 1; 0: none (user mode); KSTACK_LOST
};

// Kernel stacks (`record --kernel`): each sample's kernel call chain, by
// id in a stack-trace map (a bucket taken by another stack is not
// replaced: that sample's kernel stack is lost, counted). Off: the map
// is one entry and never used.
const volatile u32 kstacks_on = 0;
#ifndef EEXIST
#define EEXIST 17
#endif
#define KSTACK_LOST 0xffffffff
KSTACKS_MAP(kstacks);

#define COUNT_MAP(name)                                  \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_HASH);         \
		__uint(max_entries, 1 << 16);            \
		__type(key, struct count_key);           \
		__type(value, u64);                      \
	} name SEC(".maps")

COUNT_MAP(counts0);
COUNT_MAP(counts1);

// sel[0]: the generation counting now; sel[1]: one more than the last
// generation whose cache bank user space has begun to read.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u32);
} sel SEC(".maps");

// A per-CPU cache of the counts in front of the count maps, in two banks
// chosen like the maps by the generation's low bit: a sample whose key
// sits in its slot, counted in this generation, adds one there and
// touches neither hash map (each a bucket and an element in pages of
// their own: ~0.2 µs for the sent check, ~0.4 µs for the count, measured
// here). A key that takes a slot moves the count it replaces to the
// generation's map. User space reads the bank of the generation it
// drains after moving `sel` on; the programs write only the other bank
// until the next move, and overwrite an entry of an older generation
// (drained) without moving it. One page per bank and CPU.
#define CC_SLOTS 128
struct ccent {
	struct count_key k;
	u32 gen; // the generation (sel) whose count n is
	u32 n;   // 0: empty
};
struct ccbank {
	struct ccent e[CC_SLOTS];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct ccbank);
} ccache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, u64);
	__type(value, u8);
} sent SEC(".maps");

// The stacks this CPU sent, or found sent, lately: direct-mapped by id, a
// hit skips the look in `sent` (a hash lookup per sample). User space
// keeps every stack it was sent, so a slot that outlives its `sent` entry
// loses nothing.
#define SENT_SLOTS 256
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SENT_SLOTS);
	__type(key, u32);
	__type(value, u64);
} sentc SEC(".maps");

// urgent[0] != 0 (user space sets it while a program observed starts):
// every record wakes the reader at once. An import's code objects are
// freed within a millisecond of it ending; the names are read from the
// process as each new stack comes.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} urgent SEC(".maps");

// Native stacks (`record --native`): each sample sends its count key, the
// thread's user registers and up to native_bytes of its user stack
// (natcopy.h) instead of adding to the count maps; user space unwinds the
// copy with CFI and glues the walked Python frames in. 0: off (the ring is
// one page, never used).
const volatile u32 native_bytes = 0;
// Wake the reader once this much waits in natstacks (0: never; it reads
// on its own timer).
const volatile u32 nat_wake = 0;
NATCOPY_MAPS(natstacks, 1 << 24, natbuf);

static __always_inline void count(u32 slot)
{
	counter_add(&counters, slot, 1);
}

static __always_inline u64 counter_get(u32 slot)
{
	u64 *c = bpf_map_lookup_elem(&counters, &slot);
	return c ? *c : 0;
}

static __always_inline void add_count(void *m, struct count_key *k, u64 n)
{
	u64 *c = bpf_map_lookup_elem(m, k);
	if (c) {
		__sync_fetch_and_add(c, n);
		return;
	}
	if (!bpf_map_update_elem(m, k, &n, BPF_NOEXIST))
		return;
	c = bpf_map_lookup_elem(m, k); // another CPU put it first
	if (c)
		__sync_fetch_and_add(c, n);
	else
		counter_add(&counters, C_AGGFULL, n);
}

static __always_inline void emit(struct sample *s)
{
	u32 d = s->h.depth;
	if (d > MAX_FRAMES)
		d = MAX_FRAMES;
	u64 size = sizeof(struct sample_hdr) + (u64)d * sizeof(struct frame);
	if (size > sizeof(struct sample))
		size = sizeof(struct sample);
	// A wake-up is an interrupt (a VM exit here): batch them; user space
	// also reads on a timer.
	u64 wake = 0;
	u32 zero = 0;
	u32 *now = bpf_map_lookup_elem(&urgent, &zero);
	if (now && *now)
		wake = BPF_RB_FORCE_WAKEUP;
	else if (cfg.wake_bytes)
		wake = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) + size >= cfg.wake_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&samples, s, size, wake))
		count(C_LOST);
}

// sent_once sends the sample's stack unless this CPU or `sent` knows it
// was sent; 0: it was not (the ring was full), tried again next time.
static __always_inline int sent_once(struct sample *s, u64 id)
{
	u32 slot = (u32)id & (SENT_SLOTS - 1);
	u64 *seen = bpf_map_lookup_elem(&sentc, &slot);
	if (seen && *seen == id)
		return 1;
	if (!bpf_map_lookup_elem(&sent, &id)) {
		u64 lost = counter_get(C_LOST);
		emit(s);
		if (counter_get(C_LOST) != lost)
			return 0;
		u8 one = 1;
		bpf_map_update_elem(&sent, &id, &one, BPF_ANY);
	}
	if (seen)
		*seen = id;
	return 1;
}

// raced counts n samples whose cache write may have crossed a drain:
// user space began to read generation gen's bank (sel[1] > gen) while
// this run, stalled past the drain's 1 ms wait (a vCPU descheduled),
// still wrote it: those samples may be missing from the drains or,
// moved to the map, counted twice. Checked after the write (an atomic
// add: a full barrier), so a stall anywhere before it is seen.
static __always_inline void raced(u32 gen, u64 n)
{
	u32 one = 1;
	u32 *rd = bpf_map_lookup_elem(&sel, &one);
	if (rd && *(volatile u32 *)rd > gen)
		counter_add(&counters, C_CCRACED, n);
}

static __always_inline int same_key(struct count_key *a, struct count_key *b)
{
	return a->id == b->id && a->tid == b->tid && a->tgid == b->tgid && a->flags == b->flags && a->kstack == b->kstack;
}

SEC("perf_event")
int kwalk_sample(void *ctx)
{
	u64 pt = bpf_get_current_pid_tgid();
	u32 tgid = (u32)(pt >> 32);
	// One process (cfg.tgid), or a set of them (cfg.tgid 0: procset.h's
	// members, grown in the kernel as they fork or enter the cgroup).
	if (cfg.tgid ? tgid != cfg.tgid : !procset_current(tgid))
		return 0;
	u32 tid = (u32)pt;
	count(C_SAMPLES);
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	pywalk_reset(s, tid, bpf_ktime_get_ns());
	struct pywalk_ev ev = {};
	if (PW_READY)
		pywalk_events(pywalk_scratch(tid), &ev);
	else
		s->h.flags = S_PREPY;
	u32 flags = s->h.flags;
	counter_add(&counters, C_MAPSTALE, ev.mapstale);
	counter_add(&counters, C_TLSBAD, ev.tlsbad);
	if (flags & S_BYTLS)
		count(C_BYTLS);
	if (flags & S_MAPKEY_FS)
		count(C_FSKEY);
	if (flags & S_NOPY)
		count(C_NOPY);
	if (flags & S_EMPTY)
		count(C_EMPTY);
	if (flags & S_COMPLETE)
		count(C_WALKED);
	if (flags & S_TRUNCATED)
		count(C_TRUNCATED);
	if (flags & S_FAULT)
		count(C_FAULTED);
	if (flags & S_INVALID)
		count(C_INVALID);
	if (flags & S_PREPY)
		count(C_PREPY);
	if (!aggregate) {
		emit(s);
		return 0;
	}
	struct count_key k = {.tgid = s->h.tgid, .tid = tid,
			      .flags = flags & (S_COMPLETE | S_TRUNCATED | S_FAULT | S_INVALID | S_NOPY | S_EMPTY | S_PREPY)};
	if (kstacks_on) {
		long kid = bpf_get_stackid(ctx, &kstacks, 0);
		if (kid >= 0) {
			k.kstack = (u32)kid + 1;
			count(C_KSTACK);
		} else if (kid == -EEXIST) {
			k.kstack = KSTACK_LOST;
			count(C_KLOST);
		} // -EFAULT: the sample hit user mode, no kernel frames
	}
	if (s->h.depth > 0)
		k.id = s->h.id;
	if (native_bytes) {
		if (k.id)
			sent_once(s, k.id);
		struct natrec *r = bpf_map_lookup_elem(&natbuf, &zero);
		if (!r)
			return 0;
		// The user registers: at the sample if it hit user mode, else
		// where the thread entered the kernel (the top of its kernel
		// stack) — either way task_pt_regs.
		struct uregs u = {};
		bpf_probe_read_kernel(&u, sizeof(u), (void *)bpf_task_pt_regs(bpf_get_current_task_btf()));
		r->id = k.id;
		r->tid = tid;
		r->tgid = k.tgid;
		r->flags = k.flags;
		r->kstack = k.kstack;
		r->nlinks = s->h.nlinks < NAT_LINKS ? s->h.nlinks : NAT_LINKS;
		__builtin_memcpy(r->links, s->links, sizeof(r->links));
		u32 n = nat_copy(r, &u, native_bytes);
		u64 wake = BPF_RB_NO_WAKEUP;
		if (nat_wake && bpf_ringbuf_query(&natstacks, BPF_RB_AVAIL_DATA) + nat_size(n) >= nat_wake)
			wake = BPF_RB_FORCE_WAKEUP;
		if (bpf_ringbuf_output(&natstacks, r, nat_size(n), wake)) {
			count(C_NATLOST);
			return 0;
		}
		count(C_NATSENT);
		counter_add(&counters, C_NATBYTES, n);
		return 0;
	}
	u32 *which = bpf_map_lookup_elem(&sel, &zero);
	u32 gen = which ? *which : 0;
	void *counts = gen & 1 ? (void *)&counts1 : (void *)&counts0;
	u32 bank = gen & 1;
	struct ccbank *b = bpf_map_lookup_elem(&ccache, &bank);
	if (!b) {
		if (k.id)
			sent_once(s, k.id);
		add_count(counts, &k, 1);
		return 0;
	}
	u64 h = mix(mix(k.id, (u64)k.tid << 32 | k.flags), k.kstack);
	struct ccent *e = &b->e[(u32)h & (CC_SLOTS - 1)];
	if (e->n && e->gen == gen && same_key(&e->k, &k)) {
		__sync_fetch_and_add(&e->n, 1); // sent when it took the slot
		count(C_CCHIT);
		raced(gen, 1);
		return 0;
	}
	if (k.id && !sent_once(s, k.id)) {
		add_count(counts, &k, 1); // its stack not sent: not cached, so the next sample tries again
		return 0;
	}
	u64 moved = 0;
	if (e->n && e->gen == gen) {
		moved = e->n;
		add_count(counts, &e->k, moved);
	}
	e->k = k;
	e->gen = gen;
	e->n = 0;
	__sync_fetch_and_add(&e->n, 1);
	raced(gen, 1 + moved);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
