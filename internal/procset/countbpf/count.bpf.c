//go:build ignore

// countbpf: syscalls per member of a process set (procset.h), the smallest
// program that uses the set; internal/procset's tests check the set's
// growth with it.

#include "procset.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);   // tgid
	__type(value, u64); // syscalls
} calls SEC(".maps");

SEC("raw_tp/sys_enter")
int count_enter(u64 *ctx)
{
	u32 tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	if (!procset_current(tgid))
		return 0;
	u64 one = 1;
	u64 *n = bpf_map_lookup_elem(&calls, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&calls, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
