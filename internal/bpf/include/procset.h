// procset.h: the set of processes a program observes, kept in the kernel
// so that a process is a member from its first instruction.
//
// User space seeds `procs` (the -p pids, a spawned command held before its
// exec, a cgroup's processes at the start); with `procset_follow` the fork
// program adds every child a member forks (threads are not processes: a
// clone that shares the thread group adds nothing), and with
// `procset_cgroup` every process whose task runs in that cgroup (v2 id)
// joins at its first event. Each join, exec and exit of a member goes to
// user space once through `procset_events` for its account (processes
// seen, joined late, exited); an exited member leaves the map so that its
// number, reused later, is not a member.
//
// Include it after pyobs.h; attach procset_fork, procset_exec and
// procset_exit (raw tracepoints: no tracefs) beside the program's own;
// internal/procset does it and reads the events. A program filters with
// procset_current(tgid) where it filtered by one tgid.

#ifndef PYOBS_PROCSET_H
#define PYOBS_PROCSET_H

#include "pyobs.h"

static u64 (*bpf_get_current_cgroup_id)(void) = (void *)80;

// How a process became a member (procset_member.how, procset_event.how).
#define PS_SEED 1   // put there by user space
#define PS_FORK 2   // forked by a member
#define PS_CGROUP 3 // ran in the observed cgroup

// Event kinds.
#define PS_EV_JOIN 1
#define PS_EV_EXEC 2
#define PS_EV_EXIT 3

struct procset_member {
	u64 joined; // CLOCK_MONOTONIC ns
	u32 parent; // the forking member's tgid (PS_FORK), else 0
	u32 how;
	u32 execs; // execs since it joined
	u32 pad;
};

struct procset_event {
	u64 time;
	u32 kind;
	u32 tgid;
	u32 parent;
	u32 how;
	u32 code; // reserved (0)
	u32 pad;
};

const volatile u32 procset_follow = 0;
const volatile u64 procset_cgroup = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct procset_member);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} procset_events SEC(".maps");

PERCPU_COUNTERS(procset_counters, 4);
#define PS_C_EVLOST 0 // an event the ring had no room for
#define PS_C_FULL 1   // a process that could not join: the map is full

static __always_inline void procset_event(u32 kind, u32 tgid, u32 parent, u32 how, u32 code)
{
	struct procset_event *e = bpf_ringbuf_reserve(&procset_events, sizeof(*e), 0);
	if (!e) {
		counter_add(&procset_counters, PS_C_EVLOST, 1);
		return;
	}
	e->time = bpf_ktime_get_ns();
	e->kind = kind;
	e->tgid = tgid;
	e->parent = parent;
	e->how = how;
	e->code = code;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline int procset_join(u32 tgid, u32 parent, u32 how)
{
	struct procset_member m = {.joined = bpf_ktime_get_ns(), .parent = parent, .how = how};
	if (bpf_map_update_elem(&procs, &tgid, &m, BPF_NOEXIST)) {
		if (!bpf_map_lookup_elem(&procs, &tgid))
			counter_add(&procset_counters, PS_C_FULL, 1);
		return 0;
	}
	procset_event(PS_EV_JOIN, tgid, parent, how, 0);
	return 1;
}

// procset_current: whether the current task's process (tgid) is observed.
static __always_inline int procset_current(u32 tgid)
{
	if (bpf_map_lookup_elem(&procs, &tgid))
		return 1;
	if (procset_cgroup && bpf_get_current_cgroup_id() == procset_cgroup)
		return procset_join(tgid, 0, PS_CGROUP) || bpf_map_lookup_elem(&procs, &tgid) != 0;
	return 0;
}

// args: parent, child (task_struct pointers).
SEC("raw_tp/sched_process_fork")
int procset_fork(u64 *ctx)
{
	if (!procset_follow)
		return 0;
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	int ptgid = 0, ctgid = 0;
	bpf_probe_read_kernel(&ptgid, sizeof(ptgid), &parent->tgid);
	bpf_probe_read_kernel(&ctgid, sizeof(ctgid), &child->tgid);
	if (ctgid == ptgid) // a thread
		return 0;
	u32 p = (u32)ptgid;
	if (!bpf_map_lookup_elem(&procs, &p))
		return 0;
	procset_join((u32)ctgid, p, PS_FORK);
	return 0;
}

// args: task, old pid, bprm. The task is current.
SEC("raw_tp/sched_process_exec")
int procset_exec(u64 *ctx)
{
	u32 tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	struct procset_member *m = bpf_map_lookup_elem(&procs, &tgid);
	if (!m)
		return 0;
	m->execs++;
	procset_event(PS_EV_EXEC, tgid, m->parent, m->how, 0);
	return 0;
}

// Only the fields read (CO-RE, flavoured names so that pyobs.h's
// task_struct stays the one the other programs see): a thread group's
// count of live threads.
typedef struct {
	int counter;
} procset_atomic;

struct signal_struct___ps {
	procset_atomic live;
} __attribute__((preserve_access_index));

struct task_struct___ps {
	struct signal_struct___ps *signal;
} __attribute__((preserve_access_index));

static u64 (*procset_current_task)(void) = (void *)35; // bpf_get_current_task

// args: task (current). A process ends when its last thread does: the
// kernel counts a group's live threads down before this tracepoint, so a
// thread that sees none left is the last one (an exec from a thread other
// than the leader ends the old leader, not the process: threads remain).
SEC("raw_tp/sched_process_exit")
int procset_exit(u64 *ctx)
{
	u32 tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	struct procset_member *m = bpf_map_lookup_elem(&procs, &tgid);
	if (!m)
		return 0;
	struct task_struct___ps *t = (struct task_struct___ps *)procset_current_task();
	struct signal_struct___ps *sig = 0;
	int live = 0;
	if (!bpf_probe_read_kernel(&sig, sizeof(sig), &t->signal) && sig)
		bpf_probe_read_kernel(&live, sizeof(live), &sig->live.counter);
	if (live > 0)
		return 0;
	u32 how = m->how, parent = m->parent;
	bpf_map_delete_elem(&procs, &tgid);
	procset_event(PS_EV_EXIT, tgid, parent, how, 0);
	return 0;
}

#endif
