// pyobs.h: what every pyobs eBPF program declares about the kernel, in one
// place. No libbpf headers: the integer types, the section and map-definition
// macros libbpf's loader conventions use (cilium/ebpf reads the same BTF map
// definitions), the map types and helper ids of include/uapi/linux/bpf.h, and
// the few kernel structs the programs read, each with only the fields used
// (CO-RE relocates them by name against the running kernel's BTF).
//
// Included by every pyobs eBPF program (the BPF_PKGS of the Makefile; with
// pywalk.h, the CPython stack walk, by the ones that walk); `make generate`
// rebuilds them all (bpf2go -cflags -I this directory).

#ifndef PYOBS_BPF_H
#define PYOBS_BPF_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
// BTF map definitions: the loader reads a map's shape from these types.
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1 };

// Helper ids (include/uapi/linux/bpf.h).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_get_current_comm)(void *buf, u32 size) = (void *)16;
static long (*bpf_get_stackid)(void *ctx, void *map, u64 flags) = (void *)27;
static long (*bpf_probe_read_user)(void *dst, u32 size, const void *src) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *src) = (void *)113;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, u64 size, u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, u64 flags) = (void *)132;

struct task_struct;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

// Only the fields read; CO-RE finds them by name in the running kernel.
struct sched_entity {
	u64 sum_exec_runtime; // ns the task has run (the scheduler's clock_task)
} __attribute__((preserve_access_index));
struct task_struct {
	int pid;
	int tgid;
	u64 start_time; // CLOCK_MONOTONIC ns, like bpf_ktime_get_ns
	struct sched_entity se;
} __attribute__((preserve_access_index));

// x86_64: the user registers saved at syscall entry, in the kernel's order
// (arch/x86/include/asm/ptrace.h). Read through CO-RE (offcpu) or at fixed
// offsets (PT_REGS_OFF: raw tracepoints that must load without BTF).
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
} __attribute__((preserve_access_index));
#define PT_REGS_OFF(field) __builtin_offsetof(struct pt_regs, field)

// Counters: a per-CPU array of u64 slots (no atomics needed); user space
// sums each slot over the CPUs (internal/bpfload: Counters).
// A kernel-stack map (bpf_get_stackid): 8192 buckets of 64 return
// addresses; a bucket holding another stack is not replaced (-EEXIST).
#define KSTACKS_MAP(name)                              \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);\
		__uint(max_entries, 8192);             \
		__uint(key_size, sizeof(u32));         \
		__uint(value_size, 64 * sizeof(u64));  \
	} name SEC(".maps")

#define PERCPU_COUNTERS(name, slots)                 \
	struct {                                     \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); \
		__uint(max_entries, slots);          \
		__type(key, u32);                    \
		__type(value, u64);                  \
	} name SEC(".maps")

static __always_inline void counter_add(void *map, u32 slot, u64 n)
{
	u64 *c = bpf_map_lookup_elem(map, &slot);
	if (c)
		*c += n;
}

// A ring buffer's records have no map type to carry theirs into the BTF,
// where bpf2go -type looks for it: a global pointer of the type does (it is
// never read; the loader makes it a variable nobody loads).
#define BTF_KEEP(type, name) type *name __attribute__((unused))

#endif
