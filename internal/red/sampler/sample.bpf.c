//go:build ignore

// The sampling half of pyobs red: a perf_event program on one task-clock
// event per CPU, filtered here by the observed set (procset.h; user space
// shares red.bpf.c's `procs` map with this object). Each sample of one of
// the set's threads walks that thread's Python stack at the sample's
// instant (pywalk.h) and sends a 24-byte hit (time, tid, the stack's hash,
// the walk's verdict) to the `hits` ring; a stack's frames go once to the
// `pystacks` ring, the first time its hash is seen (the `pyseen` LRU).
// A thread off CPU gets no tick, so the same walk also runs when one of the
// target's threads is switched out (raw_tp/sched_switch: current is still
// that thread); at its switch-in, a wait of at least min_off_ns is sent as
// a hit with its duration and the stack it blocked in. User space joins
// hits to requests by thread and time: the request that thread was serving
// at that instant (red.bpf.c's syscalls say which).
//
// A forked worker has its parent's addresses, so one walk configuration
// (cfg) serves every member forked from the target; a member that exec'd a
// new program is not walked (its hits say "no thread state" or fault).
//
// Build: make generate (bpf2go -target amd64: pywalk.h reads the thread's
// fsbase through CO-RE); the object is committed.

// Ticks can land in 3.11/3.12's eval-loop entry (pywalk.h).
#define PYWALK_ENTRY_RESTART
#include "pywalk.h"
#include "procset.h"

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
	K_SWITCH_OUT,  // switch-outs of the target's threads (each walked)
	K_WAITS,       // waits of at least min_off_ns sent
	K_OUT_FULL,    // switch-outs not kept: the map was full
	K_MAX = 16,
};

struct hit {
	u64 time; // CLOCK_MONOTONIC ns: the tick, or the switch-out
	u64 dur;  // 0: an on-CPU tick; else ns off CPU from time
	u64 id;   // the stack's hash; 0: not walked
	u32 tid;
	u32 flags; // S_* of pywalk.h
};

// Shortest wait sent (half a sample period), set before load.
volatile const u64 min_off_ns = 0;

struct out {
	u64 time;
	u64 id;
	u32 flags;
	u32 pad;
};

// The last switch-out of each thread not yet switched in. LRU: a thread
// that exits leaves its entry, evicted in time.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct out);
} outs SEC(".maps");

BTF_KEEP(struct hit, hit_type);

PERCPU_COUNTERS(kcounters, K_MAX);

PYWALK_SEND_MAPS(pyseen, pystacks, 1 << 21);

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} hits SEC(".maps");


static __always_inline void kcount(u32 slot)
{
	counter_add(&kcounters, slot, 1);
}

static __always_inline void send(u64 time, u64 dur, u64 id, u32 tid, u32 flags)
{
	struct hit h = {.time = time, .dur = dur, .id = id, .tid = tid, .flags = flags};
	if (bpf_ringbuf_output(&hits, &h, sizeof(h), BPF_RB_NO_WAKEUP))
		kcount(K_HIT_LOST);
}

SEC("perf_event")
int red_sample(void *ctx)
{
	u64 pt = bpf_get_current_pid_tgid();
	if (!procset_current((u32)(pt >> 32)))
		return 0;
	u32 tid = (u32)pt;
	kcount(K_SAMPLES);
	u64 now = bpf_ktime_get_ns();
	u32 flags = 0;
	u64 id = pywalk_send(tid, now, &flags, &pyseen, &pystacks, BPF_RB_NO_WAKEUP, &kcounters, K_WALKED);
	send(now, 0, id, tid, flags);
	return 0;
}

// args: preempt, prev, next (current is prev).
SEC("raw_tp/sched_switch")
int red_switch(u64 *ctx)
{
	struct task_struct *next = (struct task_struct *)ctx[2];
	u64 pt = bpf_get_current_pid_tgid();
	u64 now = bpf_ktime_get_ns();
	if (procset_current((u32)(pt >> 32))) {
		u32 tid = (u32)pt;
		struct out o = {.time = now};
		kcount(K_SWITCH_OUT);
		o.id = pywalk_send(tid, now, &o.flags, &pyseen, &pystacks, BPF_RB_NO_WAKEUP, &kcounters, K_WALKED);
		if (bpf_map_update_elem(&outs, &tid, &o, BPF_ANY))
			kcount(K_OUT_FULL);
	}
	int tgid = 0, pid = 0;
	bpf_probe_read_kernel(&tgid, sizeof(tgid), &next->tgid);
	u32 ntgid = (u32)tgid;
	if (!bpf_map_lookup_elem(&procs, &ntgid))
		return 0;
	bpf_probe_read_kernel(&pid, sizeof(pid), &next->pid);
	u32 ntid = (u32)pid;
	struct out *o = bpf_map_lookup_elem(&outs, &ntid);
	if (!o)
		return 0;
	u64 t = o->time, id = o->id;
	u32 f = o->flags;
	bpf_map_delete_elem(&outs, &ntid);
	if (now > t && now - t >= min_off_ns) {
		kcount(K_WAITS);
		send(t, now - t, id, ntid, f);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
