//go:build ignore

// In-kernel syscall accounting for `pyobs trace --engine tracepoint`.
// Build: make generate (bpf2go; kernel types and helpers from pyobs.h in
// internal/bpf/include); syscalls_bpfel.o is committed.
//
// raw_tp/sys_enter keeps (tid -> nr, enter time); raw_tp/sys_exit adds the
// call to per-syscall counters (per CPU), a log-linear latency histogram and
// an errno table, and pushes one event to a ring buffer for each call that
// was slow or failed, with the thread's Python stack read while the thread
// is still in the kernel (it cannot have run Python since the call).
// Everything is bounded; what does not fit is counted in `drops`.
//
// The stack: with the walker's layout set (PW_READY; built with
// PYWALK_ADDRS_LATE for a command held before its exec: the layout fixed
// at load, read from the command's files, the process's addresses written
// once its interpreter is up) the whole
// Python stack is walked by pywalk.h at sys_exit and the event carries its
// hash; each distinct stack goes to user space once, through `pystacks`
// (as offcpu does). sys_exit, not sys_enter: only at the exit is it known
// whether the call was slow or failed, and between the two the thread ran
// no user code, so its Python stack is the one it made the call from.
// Without the walker (a kernel that refuses bpf_loop, or no layout), the
// innermost frame alone is read (capture below) and resolved in user space.
//
// The observed processes are a set (procset.h): the target, or several,
// with the children members fork joining from their first instruction.
// With per_pid, each member's calls, errors, time and latency histogram
// are kept too (pidstats). held_tgid: a member held before its exec
// (internal/session's Hold) counts from its exec on, not the holder's
// own calls before it.

#include "pywalk.h"
#include "procset.h"

#define MAX_NR 512

// Set by the loader before the programs load (.rodata).
volatile const u32 per_pid = 0;
volatile const u32 held_tgid = 0;
u32 held_done = 0; // held_tgid has exec'd (set by sys_enter once seen)
// end_at_exec: one process observed (-p PID): once it exec'd (procset_exec
// counted it), its calls are another program's and are not counted.
volatile const u32 end_at_exec = 0;
volatile const u64 slow_ns = 0;
volatile const u32 use_filter = 0;
// With the walk, wake the reader only for an event it should act on at
// once — a stack new to it (named while its code objects are alive), or
// none walked (its late read) — or once this many bytes of events wait
// (0: at every event). It looks every 20 ms anyway, and a wake-up per
// failing call (a sleeping reader woken: a VM exit here) cost the traced
// program more than the call's accounting did.
volatile const u64 events_wake = 0;

// Python frame capture (0 off). Offsets come from pyframes' Layout.
volatile const u32 py_capture = 0;
volatile const u64 off_tstate_frame = 0;
volatile const s64 off_cframe_current = -1; // 3.11/3.12: tstate->cframe->current_frame
volatile const u64 off_frame_previous = 0;
volatile const u64 off_frame_code = 0;
volatile const u64 off_frame_instr = 0;
volatile const u64 off_frame_owner = 0;
volatile const u32 owner_skip = 0; // skip frames whose owner >= this (C-stack shims); 0 none
// Finding a thread user space has not told us about yet: walk the main
// interpreter's thread list for the tstate whose native_thread_id is the
// tid (3.11+; 0 off).
volatile const u64 runtime_addr = 0;
volatile const u64 off_runtime_interp_head = 0;
volatile const u64 off_interp_threads_head = 0;
volatile const u64 off_tstate_next = 0;
volatile const u64 off_tstate_native_tid = 0;

struct start {
	u64 ts;
	u32 nr;
	u32 tgid; // the thread's process at the enter (a tid reused elsewhere is not it)
};

struct stat {
	u64 calls;
	u64 errors;
	u64 total_ns;
	u64 max_ns;
	u64 min_ns;
};

// py: 0 no thread state known for tid, 1 frame captured, 2 a read faulted,
// 3 no Python frame, 4 capture off, 5 the whole stack walked (pyk: its
// hash, 0 when the walk got no stack; pyflags: the walk's S_* verdict).
// walked: the tstate was found by walking the interpreter's thread list
// (not from user space's map).
struct event {
	u64 enter_ns;
	u64 dur_ns;
	s64 ret;
	u32 tid;
	u32 nr;
	u64 frame;
	u64 code;
	u64 instr;
	u32 py;
	u32 walked;
	u64 tstate;
	u64 pyk;
	u32 pyflags;
	u32 tgid; // the calling process
};

BTF_KEEP(struct event, event_type);

enum {
	DROP_EVENTS = 0,   // ring buffer full: a slow/failing call without its event
	DROP_HIST = 1,     // histogram map full: a call missing from its histogram
	DROP_ERRNO = 2,    // errno map full: an error missing from its errno count
	DROP_STARTS = 3,   // enter map update failed
	RESTARTED = 4,     // ERESTART*: restarted by the kernel, not counted
	NO_ENTER = 5,      // exits whose enter was not seen (in progress at attach)
	DROP_PID = 6,      // per-pid map full: a call missing from its process's line
	PY_WALKED = 8,     // events whose whole Python stack was walked
	PY_TRUNC = 9,      // walked, deeper than the walker goes (or callers missing)
	PY_FAULT = 10,     // a read of user memory failed (page not present)
	PY_INVALID = 11,   // a check failed (torn chain)
	PY_NOPY = 12,      // no thread state found for the thread
	PY_EMPTY = 13,     // a thread state without a frame
	PY_NEW = 14,       // distinct stacks sent to user space
	PY_LOST = 15,      // pystacks ring full: a stack not sent (its calls unnamed)
	NCOUNTERS = 16,
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct start);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_NR);
	__type(key, u32);
	__type(value, struct stat);
} stats SEC(".maps");

// key: nr << 12 | bucket
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} hist SEC(".maps");

// key: nr << 12 | errno
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, u32);
	__type(value, u64);
} errnos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NR);
	__type(key, u32);
	__type(value, u32);
} filter SEC(".maps");

// Per member (tgid), with per_pid: its calls, errors, time and a latency
// histogram in trace.Hist's buckets, those of 2^32 ns (4.3 s) and more in
// the last one.
#define PID_BUCKETS 480

struct pidstat {
	u64 calls;
	u64 errors;
	u64 total_ns;
	u64 max_ns;
	u32 hist[PID_BUCKETS];
};

struct {
	__uint(type, 5); // BPF_MAP_TYPE_PERCPU_HASH
	__uint(max_entries, 8192);
	__uint(map_flags, 1); // BPF_F_NO_PREALLOC: memory for the members seen only
	__type(key, u32);
	__type(value, struct pidstat);
} pidstats SEC(".maps");

// A zero pidstat to create an entry from (too big for the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct pidstat);
} pidzero SEC(".maps");

// tid -> PyThreadState*: pywalk.h's tstates map (u64 keys), filled by
// user space; the one-frame capture reads it by tid too.

PERCPU_COUNTERS(counters, NCOUNTERS);

static __always_inline u64 counter_get(u32 slot)
{
	u64 *c = bpf_map_lookup_elem(&counters, &slot);
	return c ? *c : 0;
}

// Stacks already sent to user space, by hash, and the ring of new Python
// stacks (struct sample of pywalk.h), read before the events.
PYWALK_SEND_MAPS(pyseen, pystacks, 1 << 21);

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void count(u32 which)
{
	counter_add(&counters, which, 1);
}

// bump adds one to map[key], creating it; a full map is counted in drops.
static __always_inline void bump(void *map, u32 key, u32 drop)
{
	u64 *v = bpf_map_lookup_elem(map, &key);
	if (!v) {
		u64 zero = 0;
		bpf_map_update_elem(map, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, &key);
		if (!v) {
			count(drop);
			return;
		}
	}
	__sync_fetch_and_add(v, 1);
}

// bucket_of: the same log-linear buckets as internal/trace.Hist (4 sub-bits).
static __always_inline u32 bucket_of(u64 v)
{
	if (v < 16)
		return v;
	u64 x = v;
	u32 e = 0;
	if (x >> 32) { x >>= 32; e += 32; }
	if (x >> 16) { x >>= 16; e += 16; }
	if (x >> 8) { x >>= 8; e += 8; }
	if (x >> 4) { x >>= 4; e += 4; }
	if (x >> 2) { x >>= 2; e += 2; }
	if (x >> 1) { e += 1; }
	u64 sub = (v >> (e - 4)) & 15;
	return (e - 3) * 16 + (u32)sub;
}

// observed: whether the current process is a member now (and, held
// before its exec, has exec'd).
static __always_inline int observed(u32 tgid)
{
	if (!procset_current(tgid))
		return 0;
	if (held_tgid && tgid == held_tgid && !held_done) {
		struct procset_member *m = bpf_map_lookup_elem(&procs, &tgid);
		if (!m || !m->execs)
			return 0;
		held_done = 1;
	}
	if (end_at_exec) {
		struct procset_member *m = bpf_map_lookup_elem(&procs, &tgid);
		if (m && m->execs)
			return 0;
	}
	return 1;
}

static __always_inline void add_pid(u32 tgid, u64 dur, int failed)
{
	struct pidstat *ps = bpf_map_lookup_elem(&pidstats, &tgid);
	if (!ps) {
		u32 z = 0;
		struct pidstat *zero = bpf_map_lookup_elem(&pidzero, &z);
		if (!zero)
			return;
		bpf_map_update_elem(&pidstats, &tgid, zero, BPF_NOEXIST);
		ps = bpf_map_lookup_elem(&pidstats, &tgid);
		if (!ps) {
			count(DROP_PID);
			return;
		}
	}
	ps->calls += 1;
	ps->total_ns += dur;
	if (dur > ps->max_ns)
		ps->max_ns = dur;
	if (failed)
		ps->errors += 1;
	u32 b = bucket_of(dur);
	if (b >= PID_BUCKETS)
		b = PID_BUCKETS - 1;
	ps->hist[b] += 1;
}

SEC("raw_tp/sys_enter")
int sys_enter(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	if (!observed((u32)(id >> 32)))
		return 0;
	u64 nr = ctx[1];
	if (nr >= MAX_NR)
		return 0;
	if (use_filter) {
		u32 k = nr;
		u32 *on = bpf_map_lookup_elem(&filter, &k);
		if (!on || !*on)
			return 0;
	}
	u32 tid = (u32)id;
	// A thread's entry stays in the map between calls and is rewritten in
	// place: cheaper than an update and a delete per call.
	struct start *sp = bpf_map_lookup_elem(&starts, &tid);
	if (sp) {
		sp->nr = (u32)nr;
		sp->tgid = (u32)(id >> 32);
		sp->ts = bpf_ktime_get_ns();
		return 0;
	}
	struct start s = {.ts = bpf_ktime_get_ns(), .nr = (u32)nr, .tgid = (u32)(id >> 32)};
	if (bpf_map_update_elem(&starts, &tid, &s, BPF_ANY))
		count(DROP_STARTS);
	return 0;
}

// find_tstate walks the main interpreter's thread states for tid's.
static __always_inline u64 find_tstate(u32 tid)
{
	if (!off_tstate_native_tid || !runtime_addr)
		return 0;
	u64 interp = 0, ts = 0;
	if (bpf_probe_read_user(&interp, 8, (void *)(runtime_addr + off_runtime_interp_head)) || !interp)
		return 0;
	if (bpf_probe_read_user(&ts, 8, (void *)(interp + off_interp_threads_head)))
		return 0;
	for (int i = 0; i < 256 && ts; i++) {
		u64 native = 0;
		if (bpf_probe_read_user(&native, 8, (void *)(ts + off_tstate_native_tid)))
			return 0;
		if (native == tid)
			return ts;
		if (bpf_probe_read_user(&ts, 8, (void *)(ts + off_tstate_next)))
			return 0;
	}
	return 0;
}

static __always_inline void capture(struct event *ev)
{
	if (!py_capture) {
		ev->py = 4;
		return;
	}
	u64 tid = ev->tid;
	u64 tstate = 0;
	u64 *ts = bpf_map_lookup_elem(&tstates, &tid);
	if (ts) {
		tstate = *ts;
	} else {
		tstate = find_tstate((u32)tid);
		if (!tstate) {
			ev->py = 0;
			return;
		}
		// Remember it; user space's next refresh replaces or removes it.
		bpf_map_update_elem(&tstates, &tid, &tstate, BPF_ANY);
		ev->walked = 1;
	}
	ev->tstate = tstate;
	u64 f = 0;
	if (bpf_probe_read_user(&f, 8, (void *)(tstate + off_tstate_frame))) {
		ev->py = 2;
		return;
	}
	if (off_cframe_current >= 0 && f) {
		if (bpf_probe_read_user(&f, 8, (void *)(f + off_cframe_current))) {
			ev->py = 2;
			return;
		}
	}
	ev->py = 3;
	// Skip C-stack shims and a frame still being pushed (no code yet).
	for (int i = 0; i < 4; i++) {
		if (!f)
			return;
		u64 code = 0, prev = 0;
		u8 owner = 0;
		if (bpf_probe_read_user(&code, 8, (void *)(f + off_frame_code)) ||
		    bpf_probe_read_user(&prev, 8, (void *)(f + off_frame_previous))) {
			ev->py = 2;
			return;
		}
		if (owner_skip) {
			if (bpf_probe_read_user(&owner, 1, (void *)(f + off_frame_owner))) {
				ev->py = 2;
				return;
			}
		}
		if ((owner_skip && owner >= owner_skip) || code == 0) {
			f = prev;
			continue;
		}
		u64 instr = 0;
		if (bpf_probe_read_user(&instr, 8, (void *)(f + off_frame_instr))) {
			ev->py = 2;
			return;
		}
		ev->frame = f;
		ev->code = code;
		ev->instr = instr;
		ev->py = 1;
		return;
	}
}

SEC("raw_tp/sys_exit")
int sys_exit(u64 *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	// Only a member's enter (observed) writes an entry: no second look
	// at the set here. A thread that ended inside a call leaves its entry
	// behind; its tid reused by another process is told apart by tgid.
	struct start *sp = bpf_map_lookup_elem(&starts, &tid);
	if (!sp || !sp->ts || sp->tgid != (u32)(id >> 32)) {
		// Filtered out at enter, or in progress when we attached.
		return 0;
	}
	u64 now = bpf_ktime_get_ns();
	u64 enter = sp->ts;
	u32 nr = sp->nr;
	sp->ts = 0; // exited: the entry waits for the thread's next call
	if (nr >= MAX_NR)
		return 0;
	s64 ret = (s64)ctx[1];
	if (ret <= -512 && ret >= -516) {
		// ERESTARTSYS..ERESTART_RESTARTBLOCK: the kernel restarts the call
		// (or the rest appears as restart_syscall); the program never sees it.
		count(RESTARTED);
		return 0;
	}
	u64 dur = now - enter;
	struct stat *st = bpf_map_lookup_elem(&stats, &nr);
	if (!st)
		return 0;
	st->calls += 1;
	st->total_ns += dur;
	if (dur > st->max_ns)
		st->max_ns = dur;
	if (st->calls == 1 || dur < st->min_ns)
		st->min_ns = dur;
	int failed = ret < 0 && ret >= -4095;
	if (failed) {
		st->errors += 1;
		bump(&errnos, nr << 12 | (u32)(-ret), DROP_ERRNO);
	}
	bump(&hist, nr << 12 | bucket_of(dur), DROP_HIST);
	if (per_pid)
		add_pid((u32)(id >> 32), dur, failed);
	if (dur < slow_ns && !failed)
		return 0;
	// Walked before the event is reserved: the walk may fail the program's
	// budget on no account of a record held open.
	u64 pyk = 0;
	u32 pyflags = 0;
	u32 listed = 0;
	// Whether the reader should see this event at once: a captured frame
	// is resolved at once (below, without the walk); a walked one's
	// freshness is the walk's (its stack new, or none). A new stack is
	// forced out (its code objects are named while alive).
	int fresh = py_capture, urgent = 0;
	if (PW_READY) {
		// A thread user space has not mapped yet: its TLS pointer to its
		// thread state is cleared while it has released the GIL (3.12+),
		// which is how most slow calls are made; the interpreter's thread
		// list still has it (3.11+).
		// Not for a member with its own addresses (pyaddrs: an exec'd
		// interpreter): runtime_addr is the target's _PyRuntime.
		u64 key = tid;
		u32 tgid = (u32)(id >> 32);
		if (!bpf_map_lookup_elem(&tstates, &key) && !bpf_map_lookup_elem(&pyaddrs, &tgid)) {
			u64 ts = find_tstate(tid);
			if (ts && !bpf_map_update_elem(&tstates, &key, &ts, BPF_ANY))
				listed = 1;
		}
		u64 sent = counter_get(PY_WALKED + PYC_NEW); // per CPU: this program's own, unpreempted
		pyk = pywalk_send(tid, now, &pyflags, &pyseen, &pystacks, BPF_RB_NO_WAKEUP, &counters, PY_WALKED);
		urgent = counter_get(PY_WALKED + PYC_NEW) != sent;
		fresh = !pyk || urgent;
	}
	struct event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(DROP_EVENTS);
		return 0;
	}
	ev->enter_ns = enter;
	ev->dur_ns = dur;
	ev->ret = ret;
	ev->tid = tid;
	ev->nr = nr;
	ev->frame = 0;
	ev->code = 0;
	ev->instr = 0;
	ev->walked = listed;
	ev->tstate = 0;
	ev->pyk = pyk;
	ev->pyflags = pyflags;
	ev->tgid = (u32)(id >> 32);
	if (PW_READY)
		ev->py = 5;
	else
		capture(ev);
	// Batched: an event with a new stack is forced out (with 0 the reader
	// would wake only if it had consumed everything before it: behind
	// unwoken events it would wait for the next timed read); one without
	// a stack (a thread not known yet, or a process not Python) wakes it
	// as unbatched events do, not every time in a burst.
	u64 wake = 0;
	if (events_wake && urgent)
		wake = BPF_RB_FORCE_WAKEUP;
	else if (events_wake && !fresh)
		wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= events_wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(ev, wake);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
