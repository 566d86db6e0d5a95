//go:build ignore

// The kernel half of pyobs offcpu's eBPF engine: one program on
// sched_switch that, for the threads of one process (or of a set of
// processes: procset.h), stamps each switch-out
// with its time, kernel + user stack ids and wait hints, and at the
// matching switch-in adds the interval to an aggregate keyed by (thread,
// stacks, hints, Python stack id) — so only sums cross to user space.
// A second program on sched_waking notes when a target thread was woken:
// the switch-in splits a blocked wait there (blocked, then runnable and
// waiting for a CPU: run-queue). With --waker it also notes who woke it
// (its tid, comm, kernel stack), and the switch-in adds the wait to a
// second aggregate keyed by the wait and its waker.
//
// With a walker configuration (PW_READY) the switch-out also walks
// the thread's Python stack, right there (pywalk.h, the walk record's
// kernel walker uses): each distinct stack is sent once to user space
// through a ring buffer and the wait is keyed by its hash (pyk), so every
// wait — however short — has the Python stack it blocked in.
//
// The kernel types, helpers and map macros come from pyobs.h
// (internal/bpf/include), shared by the programs; the walk from pywalk.h.
//
// Build: make generate (bpf2go + clang -target bpf); the object is committed.

// Built three times (gen.go): as is, cfg fixed at load (the verifier sees
// the layout as constants); for a command held before its exec
// (Config.Late), with OFFCPU_LATE when user space read the layout from the
// command's files (cfg still constant, the process's addresses written
// once its interpreter is up), and with OFFCPU_HELD when it could not
// (cfg written then: a program the verifier must check for every layout,
// a longer load, so it is used only there).
#ifdef OFFCPU_HELD
#define PYWALK_CFG_MUTABLE
#endif
#ifdef OFFCPU_LATE
#define PYWALK_ADDRS_LATE
#endif
#include "pywalk.h"
#include "procset.h"

#define TASK_UNINTERRUPTIBLE 0x2
#define __TASK_STOPPED 0x4
#define __TASK_TRACED 0x8
#define TASK_DEAD 0x80

// Hints: what the wait was, so that user space can classify a wait it never
// looked at (see internal/offcpu: Classify).
#define F_RUNQ 0x1   // preempted: runnable, not blocked
#define F_D 0x2      // TASK_UNINTERRUPTIBLE
#define F_REGS 0x4   // sysnr and F_GIL are valid
#define F_GIL 0x8    // the syscall's first argument lies in the GIL state
#define F_BEFORE 0x10 // off CPU since before the attach (no stacks)
#define F_NEW 0x20   // a new thread's first wait for a CPU (no stacks)
#define F_FILTERED 0x40 // shorter than min_block_ns: totals only
#define F_WOKEN 0x80    // the part of a blocked wait after its waking: runnable, waiting for a CPU
#define F_PREPY 0x100   // began before the walk was configured (a held command's interpreter not up yet)
#define F_STOPPED 0x200 // a job-control stop (SIGSTOP…) or a ptrace stop: not a wait of the thread's own
#define F_NOFDS 0x400   // a select, pselect6, poll or ppoll given no descriptor and a timeout: a sleep

// x86_64 numbers of the calls F_NOFDS looks at (the program is built for
// amd64 only: gen.go).
#define NR_POLL 7
#define NR_SELECT 23
#define NR_PSELECT6 270
#define NR_PPOLL 271

struct start {
	u64 ts;  // switch-out time
	u64 uip; // user instruction pointer (the syscall's return address)
	s32 kstack;
	s32 sysnr;
	u32 flags;
	u32 pad;
	u64 pyk; // the Python stack walked at the switch-out (its hash), 0: none
};

struct wkey {
	u64 uip;
	u32 tid;
	s32 kstack;
	s32 sysnr;
	u32 flags;
	u32 pyid; // user space's Python stack id, 0: not read
	u32 pad;
	u64 pyk;  // the kernel's Python stack (hash), 0: not walked
};

struct wval {
	u64 ns;
	u64 count;
};

struct thr {
	u64 first;    // watched since (attach, or the thread's creation)
	u64 on_since; // 0 while off CPU
	u64 on_ns;
	u64 off_ns;
	u64 rq_ns;
	u64 outs;
	u64 exited; // time of the final switch-out, 0 while alive
	// The scheduler's run time of the task at its switch-in, +1 (0: not
	// read), and the part of on_ns it did not run: an on-CPU interval
	// holds time the hypervisor stole and interrupts took, which the
	// scheduler's clock (and the thread's CPU time) leave out.
	u64 exec_in;
	u64 lost_ns;
	// The last kernel stack walked, and for which blocking call: see
	// switch_out.
	u64 walked;
	u64 walk_a0;
	s32 walk_nr;
	s32 walk_id;
};

// --waker: who woke a target thread (sched_waking runs in the waker's
// context; sched_wakeup may run on the wakee's CPU in an IPI).
struct wake {
	u64 ts;
	u32 tgid;
	u32 tid;
	s32 kstack;
	u32 pad;
	char comm[16];
};

// A blocked wait (the wkey fields) and who ended it.
struct okey {
	u64 uip;
	u32 tid;
	s32 kstack;
	s32 sysnr;
	u32 flags;
	u32 pyid;
	u32 wtgid;
	u32 wtid;
	s32 wkstack;
	char comm[16];
	u64 pyk;
};

struct pkey {
	u32 tid;
	u32 pad;
	u64 ts;
};

// Counter slots (per CPU; user space sums them).
enum {
	C_SWITCHES = 0,  // every sched_switch on the machine
	C_OUT,           // target switch-outs
	C_IN,            // target switch-ins
	C_DROP_START,    // start map full: the wait is lost from the profile
	C_DROP_WAITS,    // aggregate map full: the wait is in the thread totals only
	C_DROP_WAITS_NS, // their time
	C_DROP_THREADS,  // thread map full
	C_KSTACK_ERR,    // kernel stack id failed (stack map full or collision)
	C_KSTACK_REUSED, // kernel stack taken from the thread's previous wait
	C_UNPAIRED,      // a switch-in without its switch-out (a drop upstream)
	C_PYID_HIT,      // waits that got the Python stack user space read
	C_WAKES,         // target wakings recorded (--waker)
	C_DROP_WAKES,    // wakes map full: the wait has no waker
	C_DROP_OFFWAKE,  // offwake map full: the wait is in the waits map only
	C_WAKE_JOINED,   // waits joined to their waker
	C_PY_WALKED,     // switch-outs whose whole Python stack was walked
	C_PY_TRUNC,      // walked, deeper than the walker goes (or callers missing)
	C_PY_FAULT,      // a read of user memory failed (page not present)
	C_PY_INVALID,    // a check failed (torn chain)
	C_PY_NOPY,       // no thread state found for the thread
	C_PY_EMPTY,      // a thread state without a frame
	C_PY_NEW,        // distinct stacks sent to user space
	C_PY_LOST,       // pystacks ring full: a stack not sent (its waits unnamed)
	C_WOKEN,         // blocked waits split at their waking
	C_WOKEN_NS,      // their time from the waking to the switch-in (run-queue)
	C_NCOUNTERS,
};

// Bounded by design: user space sweeps entries of exited threads; what
// does not fit is counted, never grown.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct start);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct wkey);
	__type(value, struct wval);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct thr);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct pkey);
	__type(value, u32);
} pyids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct wake);
} wakes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct okey);
	__type(value, struct wval);
} offwake SEC(".maps");

KSTACKS_MAP(kstacks);

PERCPU_COUNTERS(counters, C_NCOUNTERS);

// Stacks already sent to user space, by hash, and the ring of new Python
// stacks (struct sample of pywalk.h), read by user space on its look
// without wake-ups.
PYWALK_SEND_MAPS(pyseen, pystacks, 1 << 21);

// Set before load. target_tgid: the one observed process; 0 with use_set:
// the members of procset.h's set (seeds, forks of members, a cgroup's).
const volatile u32 target_tgid = 0;
const volatile u8 use_set = 0;
// The walk's configuration comes after the load (PW_READY 0 until then):
// waits that begin before it are flagged F_PREPY.
const volatile u8 walk_late = 0;
const volatile u8 use_regs = 0;
const volatile u64 min_block_ns = 0;
// A thread that blocks again in the same syscall on the same first
// argument (fd, futex word) within this time reuses its previous kernel
// stack: the walk is the program's main cost on a switch-heavy target.
const volatile u64 reuse_ns = 0;
// --waker: join each wait to who woke it.
const volatile u8 waker = 0;

// Set by user space right before attaching (or arming).
volatile u64 attach_ns = 0;
// Nothing is recorded until the program is armed: a command held before
// its exec (held_pid) arms it at that exec (offcpu_exec), so nothing of
// the holder — its wait for the release, its runtime's threads — is the
// target's; attach_ns is then the exec's time.
volatile u8 armed = 1;
const volatile u32 held_pid = 0;
// The GIL state's address range (syscall hints); written after the load:
// a held command's interpreter is mapped after the program attaches.
volatile u64 gil_lo = 0;
volatile u64 gil_hi = 0;
// Bumped after every target switch-out is recorded: user space reads it
// from memory (no syscall) and looks at the start map only when it moved.
volatile u64 out_seq = 0;
// The end of the window, set by user space before it detaches: events after
// it are ignored, so the maps it reads then are of one instant (a detached
// program may still run for a moment).
volatile u64 stop_ns = 0;
// end_pid: the one process observed with -p PID. Its exec (offcpu_exec)
// sets exec_ns, which ends the window there as stop_ns does: the program
// it becomes is not the one observed.
const volatile u32 end_pid = 0;
volatile u64 exec_ns = 0;

// window_end: the end of the window (0: open), stop_ns or the exec.
static __always_inline u64 window_end(void)
{
	u64 stop = stop_ns, ex = exec_ns;
	if (ex && (!stop || ex < stop))
		return ex;
	return stop;
}

static __always_inline void count(u32 slot, u64 n)
{
	counter_add(&counters, slot, n);
}

// observed_current: whether the current task's process is observed (a
// cgroup's process joins the set here, at its first switch-out).
static __always_inline int observed_current(u32 tgid)
{
	if (target_tgid)
		return tgid == target_tgid;
	return use_set && procset_current(tgid);
}

// observed: whether another task's process (the switched-in one, a
// wakee) is observed.
static __always_inline int observed(u32 tgid)
{
	if (target_tgid)
		return tgid == target_tgid;
	return use_set && bpf_map_lookup_elem(&procs, &tgid) != 0;
}

static __always_inline void switch_out(void *ctx, struct task_struct *prev, u32 tid, u32 prev_state, int preempt, u64 now)
{
	struct thr *t = bpf_map_lookup_elem(&threads, &tid);
	if (!t) {
		// Running since the attach (or its creation) until now.
		struct thr z = {.walk_id = -1};
		u64 born = 0;
		bpf_probe_read_kernel(&born, sizeof(born), &prev->start_time);
		z.first = born > attach_ns ? born : attach_ns;
		z.on_since = z.first;
		if (bpf_map_update_elem(&threads, &tid, &z, BPF_NOEXIST))
			count(C_DROP_THREADS, 1);
		t = bpf_map_lookup_elem(&threads, &tid);
	}
	count(C_OUT, 1);
	if (t) {
		if (t->on_since && now > t->on_since) {
			u64 iv = now - t->on_since;
			t->on_ns += iv;
			if (t->exec_in) {
				u64 ran = 0;
				bpf_probe_read_kernel(&ran, sizeof(ran), &prev->se.sum_exec_runtime);
				ran -= t->exec_in - 1;
				if (ran < iv)
					t->lost_ns += iv - ran;
			}
		}
		t->on_since = 0;
		t->exec_in = 0;
		t->outs++;
	}
	if (prev_state & TASK_DEAD) {
		// The thread's last switch: nothing will switch it back in.
		bpf_map_delete_elem(&starts, &tid);
		if (t)
			t->exited = now;
		return;
	}
	struct start s = {};
	s.ts = now;
	s.sysnr = -1;
	s.kstack = -1;
	u64 a0 = 0;
	if (preempt || prev_state == 0)
		s.flags |= F_RUNQ;
	else if (prev_state & (__TASK_STOPPED | __TASK_TRACED))
		s.flags |= F_STOPPED;
	else if (prev_state & TASK_UNINTERRUPTIBLE)
		s.flags |= F_D;
	if (use_regs) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		unsigned long nr = 0, di = 0, ip = 0;
		bpf_probe_read_kernel(&nr, sizeof(nr), &regs->orig_ax);
		bpf_probe_read_kernel(&di, sizeof(di), &regs->di);
		bpf_probe_read_kernel(&ip, sizeof(ip), &regs->ip);
		s.sysnr = (s32)nr;
		s.flags |= F_REGS;
		a0 = di;
		if (di >= gil_lo && di < gil_hi)
			s.flags |= F_GIL;
		// A select or poll with no descriptor only waits out its
		// timeout: CPython 3.10's time.sleep is pselect6(0, NULL, NULL,
		// NULL, &ts), select.select([], [], [], t) too. Its other
		// arguments are read only in these calls.
		if ((nr == NR_SELECT || nr == NR_PSELECT6) && (u32)di == 0) {
			unsigned long tmo = 0; // arg 4: the timeout, NULL: none
			if (!bpf_probe_read_kernel(&tmo, sizeof(tmo), &regs->r8) && tmo)
				s.flags |= F_NOFDS;
		} else if (nr == NR_POLL || nr == NR_PPOLL) {
			// A failed read zeroes: it must not pass for nfds 0.
			unsigned long si = 0, dx = 0; // arg 1: nfds
			if (!bpf_probe_read_kernel(&si, sizeof(si), &regs->si) && (u32)si == 0 &&
			    !bpf_probe_read_kernel(&dx, sizeof(dx), &regs->dx)) {
				// arg 2: poll's ms (< 0: none), ppoll's timespec (NULL: none)
				if (nr == NR_POLL ? (s32)dx >= 0 : dx != 0)
					s.flags |= F_NOFDS;
			}
		}
		// Preempted at any instruction: a user frame per preemption
		// point would only multiply the keys.
		if (!(s.flags & F_RUNQ))
			s.uip = ip;
	}
	// Keyed by the syscall, whether it was a preemption or a stop (a
	// stopped thread still shows the syscall it will restart), and its first
	// argument. Not for preemptions outside a syscall (sysnr -1): the
	// interrupt differs; they come at most once per tick anyway.
	s32 walk_nr = s.sysnr | ((s.flags & F_RUNQ) ? 0x40000000 : 0) | ((s.flags & F_STOPPED) ? 0x20000000 : 0);
	int reuse = t && (s.flags & F_REGS) && s.sysnr >= 0 && t->walk_id >= 0 &&
		    t->walk_nr == walk_nr && t->walk_a0 == a0 && now - t->walked < reuse_ns;
	if (reuse) {
		s.kstack = t->walk_id;
		count(C_KSTACK_REUSED, 1);
	} else {
		s.kstack = bpf_get_stackid(ctx, &kstacks, 0);
		if (s.kstack < 0)
			count(C_KSTACK_ERR, 1);
		if (t) {
			t->walked = now;
			t->walk_a0 = a0;
			t->walk_nr = walk_nr;
			t->walk_id = s.kstack;
		}
	}
	if (PW_READY)
		s.pyk = pywalk_send(tid, now, 0, &pyseen, &pystacks, BPF_RB_NO_WAKEUP, &counters, C_PY_WALKED);
	else if (walk_late)
		s.flags |= F_PREPY;
	if (bpf_map_update_elem(&starts, &tid, &s, BPF_ANY))
		count(C_DROP_START, 1);
	__sync_fetch_and_add(&out_seq, 1);
}

static __always_inline void add_wait(struct wkey *k, u64 d)
{
	struct wval *v = bpf_map_lookup_elem(&waits, k);
	if (v) {
		v->ns += d;
		v->count++;
		return;
	}
	struct wval nv = {.ns = d, .count = 1};
	if (bpf_map_update_elem(&waits, k, &nv, BPF_NOEXIST)) {
		count(C_DROP_WAITS, 1);
		count(C_DROP_WAITS_NS, d);
	}
}

// exec_in is thr.exec_in for next at its switch-in.
static __always_inline u64 exec_in(struct task_struct *next)
{
	u64 ran = 0;
	if (bpf_probe_read_kernel(&ran, sizeof(ran), &next->se.sum_exec_runtime))
		return 0;
	return ran + 1;
}

static __always_inline void switch_in(struct task_struct *next, u32 tid, u64 now)
{
	struct wkey k = {};
	u64 from = 0;
	k.tid = tid;
	struct thr *t = bpf_map_lookup_elem(&threads, &tid);
	struct start *s = bpf_map_lookup_elem(&starts, &tid);
	if (s) {
		from = s->ts;
		k.kstack = s->kstack;
		k.uip = s->uip;
		k.sysnr = s->sysnr;
		k.flags = s->flags;
		k.pyk = s->pyk;
	} else if (t) {
		// Its switch-out found the start map full.
		count(C_UNPAIRED, 1);
		t->on_since = now;
		t->exec_in = exec_in(next);
		return;
	} else {
		// First event of this thread: off CPU since the attach, or a new
		// thread waiting for its first CPU since its creation.
		u64 born = 0;
		bpf_probe_read_kernel(&born, sizeof(born), &next->start_time);
		struct thr z = {.walk_id = -1};
		k.kstack = k.sysnr = -1;
		if (born > attach_ns) {
			from = born;
			k.flags = F_NEW | F_RUNQ;
		} else {
			from = attach_ns;
			k.flags = F_BEFORE;
		}
		z.first = from;
		if (bpf_map_update_elem(&threads, &tid, &z, BPF_NOEXIST))
			count(C_DROP_THREADS, 1);
		t = bpf_map_lookup_elem(&threads, &tid);
	}
	count(C_IN, 1);
	u64 d = now > from ? now - from : 0;
	struct pkey pk = {.tid = tid, .ts = from};
	u32 *id = bpf_map_lookup_elem(&pyids, &pk);
	if (id) {
		k.pyid = *id;
		bpf_map_delete_elem(&pyids, &pk);
		count(C_PYID_HIT, 1);
	}
	// The waking that ended a blocked wait splits it: blocked until the
	// waking, then runnable, waiting for a CPU — the scheduler's delay,
	// not the wait's (on a busy machine it can be most of the interval).
	// A waking before the switch-out raced the thread going to sleep: it
	// ended no wait of ours.
	struct wake *wk = bpf_map_lookup_elem(&wakes, &tid);
	int woken = s && !(k.flags & F_RUNQ) && wk && wk->ts >= from && wk->ts <= now;
	u64 lat = 0;
	if (woken) {
		lat = now - wk->ts;
		d -= lat;
	}
	if (d < min_block_ns)
		k.flags |= F_FILTERED;
	add_wait(&k, d);
	if (lat) {
		struct wkey r = k;
		r.flags = (k.flags & ~F_FILTERED) | F_RUNQ | F_WOKEN;
		if (lat < min_block_ns)
			r.flags |= F_FILTERED;
		add_wait(&r, lat);
		count(C_WOKEN, 1);
		count(C_WOKEN_NS, lat);
	}
	if (t) {
		if (k.flags & F_RUNQ)
			t->rq_ns += d;
		else
			t->off_ns += d;
		t->rq_ns += lat;
		t->on_since = now;
		t->exec_in = exec_in(next);
	}
	if (s)
		bpf_map_delete_elem(&starts, &tid);
	if (!wk)
		return;
	if (waker && woken) {
		struct okey o = {.uip = k.uip, .tid = tid, .kstack = k.kstack, .sysnr = k.sysnr, .flags = k.flags,
				 .pyid = k.pyid, .wtgid = wk->tgid, .wtid = wk->tid, .wkstack = wk->kstack, .pyk = k.pyk};
		__builtin_memcpy(o.comm, wk->comm, sizeof(o.comm));
		struct wval *ov = bpf_map_lookup_elem(&offwake, &o);
		if (ov) {
			ov->ns += d;
			ov->count++;
			count(C_WAKE_JOINED, 1);
		} else {
			struct wval nv = {.ns = d, .count = 1};
			if (bpf_map_update_elem(&offwake, &o, &nv, BPF_NOEXIST))
				count(C_DROP_OFFWAKE, 1);
			else
				count(C_WAKE_JOINED, 1);
		}
	}
	bpf_map_delete_elem(&wakes, &tid);
}

// args: bool preempt, struct task_struct *prev, struct task_struct *next,
// unsigned int prev_state (5.18+). prev is current here.
static __always_inline int on_switch(u64 *ctx)
{
	int preempt = ctx[0] & 1;
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	u32 prev_state = (u32)ctx[3];
	u64 now = bpf_ktime_get_ns();
	u64 pt = bpf_get_current_pid_tgid();
	u64 stop = window_end();
	if (!armed || (stop && now >= stop))
		return 0;
	count(C_SWITCHES, 1);
	if (target_tgid == 0 && !use_set)
		return 0;
	if (observed_current((u32)(pt >> 32)))
		switch_out(ctx, prev, (u32)pt, prev_state, preempt, now);
	int ntgid = 0, npid = 0;
	bpf_probe_read_kernel(&ntgid, sizeof(ntgid), &next->tgid);
	if (observed((u32)ntgid)) {
		bpf_probe_read_kernel(&npid, sizeof(npid), &next->pid);
		switch_in(next, (u32)npid, now);
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int offcpu_btf(u64 *ctx) { return on_switch(ctx); }

SEC("raw_tp/sched_switch")
int offcpu_raw(u64 *ctx) { return on_switch(ctx); }

// args: struct task_struct *p (the wakee); current is the waker.
static __always_inline int on_waking(u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	int tgid = 0, pid = 0;
	if ((target_tgid == 0 && !use_set) || !armed)
		return 0;
	bpf_probe_read_kernel(&tgid, sizeof(tgid), &p->tgid);
	if (!observed((u32)tgid))
		return 0;
	u64 now = bpf_ktime_get_ns();
	u64 stop = window_end();
	if (stop && now >= stop)
		return 0;
	bpf_probe_read_kernel(&pid, sizeof(pid), &p->pid);
	u32 tid = (u32)pid;
	u64 pt = bpf_get_current_pid_tgid();
	struct wake w = {.ts = now, .tgid = (u32)(pt >> 32), .tid = (u32)pt, .kstack = -1};
	if (waker) {
		bpf_get_current_comm(w.comm, sizeof(w.comm));
		w.kstack = bpf_get_stackid(ctx, &kstacks, 0);
		if (w.kstack < 0)
			count(C_KSTACK_ERR, 1);
	}
	count(C_WAKES, 1);
	if (bpf_map_update_elem(&wakes, &tid, &w, BPF_ANY))
		count(C_DROP_WAKES, 1);
	return 0;
}

SEC("tp_btf/sched_waking")
int waking_btf(u64 *ctx) { return on_waking(ctx); }

SEC("raw_tp/sched_waking")
int waking_raw(u64 *ctx) { return on_waking(ctx); }

// args: struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm;
// current is the task that exec'd (its other threads are gone by now).
SEC("raw_tp/sched_process_exec")
int offcpu_exec(u64 *ctx)
{
	if (end_pid && (u32)(bpf_get_current_pid_tgid() >> 32) == end_pid) {
		if (!exec_ns)
			exec_ns = bpf_ktime_get_ns();
		return 0;
	}
	if (!held_pid || armed)
		return 0;
	if ((u32)(bpf_get_current_pid_tgid() >> 32) != held_pid)
		return 0;
	attach_ns = bpf_ktime_get_ns();
	armed = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
