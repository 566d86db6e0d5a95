//go:build ignore

// The sampling half of pyobs red: a perf_event program on one task-clock
// event per CPU, filtered here by the target's tgid. Each sample of one of
// the target's threads walks that thread's Python stack at the sample's
// instant (pywalk.h) and sends a 24-byte hit (time, tid, the stack's hash,
// the walk's verdict) to the `hits` ring; a stack's frames go once to the
// `pystacks` ring, the first time its hash is seen (the `pyseen` LRU).
// User space joins hits to requests by thread and time: the request that
// thread was serving at that instant (red.bpf.c's syscalls say which).
//
// Build: make generate (bpf2go -target amd64: pywalk.h reads the thread's
// fsbase through CO-RE); the object is committed.

#include "pywalk.h"

// Counter slots (per CPU; user space sums them).
enum {
	K_SAMPLES = 0, // events of the target's threads
	K_WALKED,      // complete walks
	K_TRUNCATED,
	K_FAULTED,
	K_INVALID,
	K_NOPY,        // no thread state
	K_EMPTY,       // thread state without a frame
	K_NEW,         // distinct stacks sent
	K_STACK_LOST,  // pystacks ring full
	K_HIT_LOST,    // hits ring full
	K_MAX = 12,
};

struct hit {
	u64 time; // CLOCK_MONOTONIC ns
	u64 id;   // the stack's hash; 0: not walked
	u32 tid;
	u32 flags; // S_* of pywalk.h
};

BTF_KEEP(struct hit, hit_type);

PERCPU_COUNTERS(kcounters, K_MAX);

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, u8);
} pyseen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 21);
} pystacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} hits SEC(".maps");

#define BPF_RB_NO_WAKEUP 1

static __always_inline void kcount(u32 slot)
{
	counter_add(&kcounters, slot, 1);
}

SEC("perf_event")
int red_sample(void *ctx)
{
	u64 pt = bpf_get_current_pid_tgid();
	if ((u32)(pt >> 32) != cfg.tgid)
		return 0;
	u32 tid = (u32)pt;
	kcount(K_SAMPLES);
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	u64 now = bpf_ktime_get_ns();
	s->h.time = now;
	s->h.id = 0;
	s->h.tid = tid;
	s->h.cpu = bpf_get_smp_processor_id();
	s->h.flags = 0;
	s->h.depth = 0;
	s->h.hops = 0;
	s->h.tstate = 0;
	s->h.codegen = 0;
	s->h.last = 0;
	struct pywalk_ev ev = {};
	pywalk(s, tid, &ev);
	u32 f = s->h.flags;
	if (f & S_COMPLETE)
		kcount(K_WALKED);
	if (f & S_TRUNCATED)
		kcount(K_TRUNCATED);
	if (f & S_FAULT)
		kcount(K_FAULTED);
	if (f & S_INVALID)
		kcount(K_INVALID);
	if (f & S_NOPY)
		kcount(K_NOPY);
	if (f & S_EMPTY)
		kcount(K_EMPTY);
	u64 id = s->h.id;
	if (s->h.depth == 0)
		id = 0;
	if (id && !bpf_map_lookup_elem(&pyseen, &id)) {
		u32 d = s->h.depth;
		if (d > MAX_FRAMES)
			d = MAX_FRAMES;
		u64 size = sizeof(struct sample_hdr) + (u64)d * sizeof(struct frame);
		if (size > sizeof(struct sample))
			size = sizeof(struct sample);
		if (bpf_ringbuf_output(&pystacks, s, size, BPF_RB_NO_WAKEUP)) {
			kcount(K_STACK_LOST);
		} else {
			u8 one = 1;
			bpf_map_update_elem(&pyseen, &id, &one, BPF_ANY);
			kcount(K_NEW);
		}
	}
	struct hit h = {.time = now, .id = id, .tid = tid, .flags = f};
	if (bpf_ringbuf_output(&hits, &h, sizeof(h), BPF_RB_NO_WAKEUP))
		kcount(K_HIT_LOST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
