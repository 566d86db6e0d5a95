// pywalk.h: the CPython stack walk, in the kernel, of the current thread —
// shared by the sampling walker (internal/kwalk) and offcpu's switch-out
// (internal/offcpu/schedbpf): one walk, one set of layout facts.
//
// The including program declares nothing of it; it gets the read-only
// `cfg` (struct config, fixed at load by user space from internal/pyframes'
// kernel layout: the verifier sees the offsets as constants; a program that
// defines PYWALK_CFG_MUTABLE gets it writable, set after the load — and
// a verifier that explores every version's branches: a longer load; one that
// defines PYWALK_ADDRS_LATE keeps the layout constant and takes only the
// process's addresses after the load, in `late`), PW_READY (walk now),
// pywalk_scratch (the walk as a global function, verified once) and
// pywalk_chain (one frame chain, a global function too), the maps tstates
// (tid or fsbase -> PyThreadState*, filled by user space), pyaddrs (a
// process's own addresses where they are not cfg's), scratch, walks,
// codes_ok, win and tsv, pywalk(), and pywalk_send() to send each distinct
// stack once. See internal/kwalk/doc.go for the walk.

#ifndef PYOBS_PYWALK_H
#define PYOBS_PYWALK_H

#include "pyobs.h"

typedef signed char s8;

// The thread's fsbase (== pthread_self on x86_64 glibc/musl). A flavoured
// name (the ___ suffix is ignored by CO-RE matching) so that pyobs.h's
// task_struct stays the one the other programs see.
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___kwalk {
	struct thread_struct thread;
} __attribute__((preserve_access_index));

static u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) = (void *)130;
static u64 (*bpf_ringbuf_query)(void *ringbuf, u64 flags) = (void *)134;
static long (*bpf_loop)(u32 nr_loops, void *callback_fn, void *callback_ctx, u64 flags) = (void *)181;

// ---- Shared with Go (bpf2go -type) ----

#define MAX_FRAMES 128 // frames recorded per sample; deeper stacks are truncated
#define MAX_HOPS 512   // frames visited per sample, shims included

// What the walker needs to know about one interpreter build.
struct config {
	u64 code_type;    // &PyCode_Type: every code object's ob_type
	u64 frame_type;   // &PyFrame_Type (3.10: frames are objects)
	u64 codegen_addr; // the code-object generation: 3.14+ &interp->_code_object_generation
	                  // (bumped at each free), 3.12/3.13 the next co_version (bumped at each
	                  // creation); 0: none
	u64 code_adaptive; // offsetof(PyCodeObject, co_code_adaptive) (3.11+)
	s64 tls_off[2];   // where the thread's own tstate pointer sits, from fsbase
	u32 tls_n;        // how many of tls_off to try (0: user space's map only)
	u32 tstate_thread_id; // offset of thread_id (pthread_t == fsbase)
	u32 tstate_native_tid; // offset of native_thread_id (3.11+), 0: none
	u32 wake_bytes;   // wake the reader only once this much is waiting (0: every sample)
	u32 tgid;
	u32 minor;        // 10..15
	u32 max_frames;   // <= MAX_FRAMES
	u32 end_rule;     // END_*: what a whole chain ends at
	s32 cframe_current; // 3.11/3.12: tstate->cframe->current_frame; -1: tstate holds the frame
	u32 tstate_frame; // offset of the frame (or cframe) pointer in the thread state
	u32 tstate_base_frame; // 3.15: offset of base_frame in the thread state, 0: none
	u32 ob_type;      // offsetof(PyObject, ob_type)
	u32 frame_previous;
	u32 frame_code;
	u32 frame_instr;  // 3.11+: instruction pointer; 3.10: int f_lasti
	u32 frame_owner;  // 3.11+
	s32 frame_is_entry; // 3.11: bool is_entry; -1: none
	u32 frame_read;   // bytes of a frame header to read (<= 128)
	u32 frame_objects; // 3.10: PyFrameObject chain
	u32 code_tagged;  // 3.14+: f_executable is a _PyStackRef (mask the low bits)
	u32 owner_skip;   // owners >= this are shims (3.12+); 0: none
	u32 owner_max;    // the highest owner value of this version
	s32 gen_state_rel; // gi_frame_state relative to a generator's frame; 0: unchecked
	s32 gen_executing; // FRAME_EXECUTING of this version
	u32 frame_gen;    // 3.10: offset of PyFrameObject.f_gen, 0: none
	u32 code_flags;   // 3.10: offset of PyCodeObject.co_flags, 0: none
	u32 cframe_previous; // 3.11/3.12: offset of _PyCFrame.previous, 0: none
	u32 codegen_u32;  // the code-object generation is a u32 (3.12/3.13: the next co_version)
	u32 att_n;        // 1: att_off is known (3.12+)
	u32 tstate_interp; // offset of the thread state's interp pointer, 0: none
	u32 interp_id;    // offset of the interpreter's id (main: 0), 0: none
	s64 att_off;      // where the thread's attached tstate pointer sits, from fsbase
	                  // (_Py_tss_tstate: NULL while detached; a sub-interpreter's
	                  // while the thread runs one)
	u64 main_interp;  // the main interpreter's state (3.12+), 0: not known
	u32 ts_lo;        // the bytes of a thread state read at once for the attached
	u32 ts_len;       // state (frame, interp, thread ids), 0: read field by field
};

// co_flags of code that runs in a generator's, coroutine's or async
// generator's frame (CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE |
// CO_ASYNC_GENERATOR).
#define GEN_CODE_FLAGS (0x20 | 0x80 | 0x100 | 0x200)

// Sample flags.
#define S_COMPLETE 0x1  // the chain ended at the version's outermost marker
#define S_TRUNCATED 0x2 // deeper than max_frames / MAX_HOPS
#define S_FAULT 0x4     // a read of user memory failed (page not present, unmapped)
#define S_INVALID 0x8   // a check failed (owner, code type, loop, generator state)
#define S_NOPY 0x10     // no thread state known for this thread
#define S_EMPTY 0x20    // the thread state has no frame (not running Python)
#define S_MAPKEY_FS 0x40 // the thread state was found by fsbase, not tid
#define S_BYTLS 0x80    // the thread state was found through the thread's TLS/TSD

// Frame flags.
#define FR_ENTRY 0x1 // entered from C (3.11 is_entry; 3.12+ above a shim; 3.10 always)
#define FR_GEN 0x2   // owned by a generator/coroutine

#define END_NULL 0  // 3.10: previous == NULL is the end
#define END_ENTRY 1 // 3.11: the outermost frame is an entry frame
#define END_SHIM 2  // 3.12-3.14: the outermost frame is a shim
#define END_BASE 3  // 3.15: the outermost frame is tstate->base_frame

struct frame {
	u64 code;  // PyCodeObject*
	s32 lasti; // code units from co_code_adaptive (3.11+) / f_lasti (3.10)
	u32 flags;
};

struct sample_hdr {
	u64 time;    // CLOCK_MONOTONIC ns
	u64 id;      // the stack's identity: a hash of its frames, flags, code generation and process
	u64 tstate;  // PyThreadState*
	u64 codegen; // the interpreter's code-object generation at the sample (3.12+)
	u64 last;    // the outermost frame visited
	u32 tid;
	u32 flags;
	u16 depth;   // frames recorded
	u16 hops;    // frames visited (shims included)
	u32 cpu;
	u32 tgid;    // the sampled thread's process (a program may observe several)
	u32 nlinks;  // entries of links (the scratch's; not sent with the stack)
};

// A run's link: the C-stack address of the shim below it (3.12+: the
// eval loop's own entry frame, a local of the C function running the
// run), innermost run first; what glues the run into a native stack.
#define MAX_LINKS 32

struct sample {
	struct sample_hdr h;
	struct frame frames[MAX_FRAMES];
	u64 links[MAX_LINKS]; // never sent with the stack (its size stops at the frames)
};

// ---- Maps and globals ----

#ifdef PYWALK_CFG_MUTABLE
// Written by user space after the load (a program attached before the
// interpreter is up: its walk starts once cfg.minor is set).
volatile struct config cfg = {};
#else
const volatile struct config cfg = {};
#endif

#ifdef PYWALK_ADDRS_LATE
// A command held before its exec whose interpreter user space read from
// its files: the layout is fixed at load (cfg, constant for the verifier),
// and what the process decides as it starts — where its types are mapped
// (ASLR), its code-object generation, the TLS offsets of its thread
// states — is written here once its interpreter is up (ready last).
struct late_addrs {
	u64 code_type;
	u64 frame_type;
	u64 codegen_addr;
	s64 tls_off[2];
	s64 att_off;
	u64 main_interp;
	u32 tls_n;
	u32 att_n;
	u32 ready;
};
volatile struct late_addrs late = {};
#define PW_READY (late.ready)
#define PW_TLS_N (late.tls_n)
#define PW_TLS_OFF(i) (late.tls_off[i])
#define PW_ATT_N (late.att_n)
#define PW_ATT_OFF (late.att_off)
#define PW_CODE_TYPE (late.code_type)
#define PW_FRAME_TYPE (late.frame_type)
#define PW_CODEGEN (late.codegen_addr)
#define PW_MAIN_INTERP (late.main_interp)
#else
// The walk is configured: cfg.minor is 0 until then (only a program with
// PYWALK_CFG_MUTABLE ever sees it so).
#define PW_READY (cfg.minor)
#define PW_TLS_N (cfg.tls_n)
#define PW_TLS_OFF(i) (cfg.tls_off[i])
#define PW_ATT_N (cfg.att_n)
#define PW_ATT_OFF (cfg.att_off)
#define PW_CODE_TYPE (cfg.code_type)
#define PW_FRAME_TYPE (cfg.frame_type)
#define PW_CODEGEN (cfg.codegen_addr)
#define PW_MAIN_INTERP (cfg.main_interp)
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);   // kernel tid, or fsbase (pthread_t)
	__type(value, u64); // PyThreadState*
} tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct sample);
} scratch SEC(".maps");

// The addresses cfg holds, for one process of the same build that has its
// own (its interpreter mapped elsewhere: ASLR after an exec), by tgid;
// filled by user space, which checked the rest of the layout; a process
// not in it is walked with cfg's.
struct proc_addrs {
	u64 code_type;
	u64 frame_type;
	u64 codegen_addr;
	u64 main_interp;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, struct proc_addrs);
} pyaddrs SEC(".maps");

// Code objects whose type was checked lately, per CPU, direct-mapped by
// address: a frame whose code sits in its slot skips the type read. The
// slot folds in the address's page bits: code objects at the same offset
// of different allocator pools (a 4 KiB period) would share one slot and
// evict each other at every sample (measured: 0.9 type reads per sample
// on kwalk_deep, 0.001 folded).
#define CODE_SLOTS 256
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CODE_SLOTS);
	__type(key, u32);
	__type(value, u64);
} codes_ok SEC(".maps");

// 3.11+: frames live in contiguous data-stack chunks, callers below
// callees: one read of the page that holds a frame serves the callers
// in it too (a frame read alone costs about as much as the page). A
// frame far from the one before it (a shim on the C stack, a generator's
// frame on the heap, another chunk) is read alone, with the PRE bytes
// before it (a generator's state, 3.11+), into d[ALONE - PRE], and the
// window stays for the frames after it.
#define FBUF_WORDS 16 // 128 bytes: every frame header we read
#define WIN 4096
#define PAGE 4096
#define PRE 8
#define ALONE (WIN + FBUF_WORDS * 8 + PRE)
#define FAR (16 << 10) // DATA_STACK_CHUNK_SIZE: farther is another region
struct window {
	u8 d[ALONE + FBUF_WORDS * 8];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct window);
} win SEC(".maps");

// The attached thread state's bytes cfg.ts_lo..+ts_len, per CPU: its frame,
// interpreter and thread ids in one read.
#define TSV_WORDS 32
struct tsview {
	u64 w[TSV_WORDS];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tsview);
} tsv SEC(".maps");
#define TSV(v, off) ((v)->w[(((off) - cfg.ts_lo) >> 3) & (TSV_WORDS - 1)])

static __always_inline int read_u64(u64 *dst, u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

// ---- The walk ----

struct walk {
	u64 addr;      // the next frame to visit
	u64 last;      // the last frame visited
	u64 code_ok;   // the last code object whose type was checked
	u64 wbase;     // user address of win.d[0], 0: no window
	u32 depth;
	u32 hops;
	u32 flags;
	u32 nlinks;    // links recorded
	u8 last_shim;  // the last frame visited was a shim
	u8 last_entry; // the last Python frame recorded was an entry frame
	u8 last_gen;   // the last Python frame recorded belongs to a generator
	u8 done;
	u64 last_code; // the last Python frame's code object
	u64 hash;      // of the frames recorded
	u64 code_type; // cfg's, or the process's own (pyaddrs)
	u64 frame_type;
	u64 alt_cf;    // 3.11/3.12: the thread's cframe, for one start over (fail)
};

// One step of the stack's identity hash (a multiply-xorshift).
static __always_inline u64 mix(u64 h, u64 x)
{
	h = (h ^ x) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 29);
}

// A program whose events can land inside 3.11/3.12's eval-loop entry (a
// sampling tick: kwalk, red's sampler) defines PYWALK_ENTRY_RESTART: there
// tstate->cframe points at the new cframe a few instructions before its
// current_frame is set (stack garbage until then), and a walk that fails
// before its first frame starts over, once, from the outer cframe's frame
// (the stack of that instant). Switch-outs, syscall exits and allocator
// calls never land there; a program whose cfg is written late cannot
// have it either (its verifier, without the layout as constants, would
// explore every start over: seconds of load while a command is held).
#if defined(PYWALK_ENTRY_RESTART) && !defined(PYWALK_CFG_MUTABLE)
#define PYWALK_RESTART 1
#endif

// fail ends the walk with flag, or (PYWALK_RESTART, before the first
// frame) marks it for the start over the next step makes.
static __always_inline long fail(struct walk *w, u32 flag)
{
	w->flags |= flag;
#ifdef PYWALK_RESTART
	if (w->alt_cf && !w->depth)
		return 0;
#endif
	return 1;
}

// How the chain ended, once previous was NULL.
static __always_inline int whole(struct walk *w, u64 tstate)
{
	switch (cfg.end_rule) {
	case END_NULL: {
		// 3.10: no marker. A chain ending at a generator's frame lost its
		// callers (read between a yield and the clearing of f_back); so
		// did one whose last code is a generator's (a finished generator's
		// frame, kept by its code object, has f_gen NULL).
		if (w->last_gen)
			return 0;
		if (!cfg.code_flags)
			return 1;
		u32 fl = 0;
		if (bpf_probe_read_user(&fl, sizeof(fl), (const void *)(w->last_code + cfg.code_flags)))
			return 0;
		return !(fl & GEN_CODE_FLAGS);
	}
	case END_ENTRY:
		// 3.11: entered from C, and not a generator's frame (a generator
		// resumed from C has its caller linked while it runs).
		return w->last_entry && !w->last_shim && !w->last_gen;
	case END_SHIM:
		return w->last_shim;
	case END_BASE: {
		if (!cfg.tstate_base_frame)
			return 0;
		u64 base = tstate + cfg.tstate_base_frame;
		if (w->last == base)
			return 1; // embedded in the thread state
		u64 p = 0;
		if (read_u64(&p, base))
			return 0;
		return p != 0 && w->last == p;
	}
	}
	return 0;
}

// top_from reads the newest frame from the thread state's frame field's
// value raw (3.11/3.12: the cframe, whose current_frame it is); non-zero:
// a fault.
static __always_inline int top_from(u64 raw, u64 *top, u64 *cf)
{
	*top = raw;
	*cf = 0;
	if (cfg.cframe_current >= 0 && raw) {
		*cf = raw;
		*top = 0;
		if (read_u64(top, raw + (u64)cfg.cframe_current))
			return 1;
	}
	return 0;
}

// top_frame reads the newest frame of thread state ts into *top (0: none),
// and on 3.11/3.12 the cframe that holds it into *cf; non-zero: a fault.
static __always_inline int top_frame(u64 ts, u64 *top, u64 *cf)
{
	u64 raw = 0;
	*top = 0;
	*cf = 0;
	if (read_u64(&raw, ts + cfg.tstate_frame))
		return 1;
	return top_from(raw, top, cf);
}

// A frame header as read (FBUF_WORDS, and a word of slack).
struct fhead {
	u64 b[FBUF_WORDS + 1];
};

#define GEN_KNOWN 0x100

#define FWORD(off) (((off) >> 3) & (FBUF_WORDS - 1))

// copy_fields copies the words of a 3.11+ frame header the step reads.
static __always_inline void copy_fields(u64 *buf, u64 *src)
{
	buf[FWORD(cfg.frame_previous)] = src[FWORD(cfg.frame_previous)];
	buf[FWORD(cfg.frame_code)] = src[FWORD(cfg.frame_code)];
	buf[FWORD(cfg.frame_instr)] = src[FWORD(cfg.frame_instr)];
	buf[FWORD(cfg.frame_owner)] = src[FWORD(cfg.frame_owner)];
	if (cfg.frame_is_entry >= 0)
		buf[FWORD(cfg.frame_is_entry)] = src[FWORD(cfg.frame_is_entry)];
}

// frame_at reads the header of the frame at addr into fh: from the window
// (refilled with the page that holds it, unless it is far from the frame
// before), else alone. It returns -1 on a fault, else GEN_KNOWN | the
// generator state byte (3.11+) when it came with the header. A global
// function, checked once: inlined, its read paths multiplied the frame
// step's states (verifier time 2x).
__attribute__((noinline)) int frame_at(struct walk *w, u64 addr, struct fhead *fh)
{
	if (!w || !fh)
		return -1;
	u32 zero = 0;
	u64 *buf = fh->b;
	struct window *wb = 0;
	u8 inwin = 0; // the frame header is in the window
	s64 rel = cfg.gen_state_rel;
	if (!cfg.frame_objects) {
		wb = bpf_map_lookup_elem(&win, &zero);
		if (!wb)
			return -1;
		if (w->wbase && addr >= w->wbase && addr - w->wbase + FBUF_WORDS * 8 <= WIN) {
			inwin = 1;
		} else if (!w->last || addr - w->last + FAR <= 2 * FAR) {
			// (Re)fill the window with the page that holds this frame
			// header (unless it straddles two pages: alone): its
			// callers in the same chunk come with it.
			u64 end = (addr + FBUF_WORDS * 8 + PAGE - 1) & ~(u64)(PAGE - 1);
			w->wbase = 0;
			if (end - WIN <= addr && !bpf_probe_read_user(wb->d, WIN, (const void *)(end - WIN))) {
				w->wbase = end - WIN;
				inwin = 1;
			}
		} // else far from the frame before: alone, the window kept
	}
	if (inwin) {
		u32 off = (u32)(addr - w->wbase) & (WIN - 1);
		u64 *src = (u64 *)&wb->d[off];
		copy_fields(buf, src);
		u64 sa = addr + rel;
		if (rel && sa >= w->wbase && sa - w->wbase < WIN)
			return GEN_KNOWN | wb->d[(sa - w->wbase) & (WIN - 1)];
		return 0;
	}
	u32 n = cfg.frame_read;
	if (n == 0 || n > FBUF_WORDS * 8)
		n = FBUF_WORDS * 8;
	if (wb && rel >= -PRE && rel < 0 && n <= FBUF_WORDS * 8 - PRE &&
	    !bpf_probe_read_user(&wb->d[ALONE - PRE], n + PRE, (const void *)(addr - PRE))) {
		u64 *src = (u64 *)&wb->d[ALONE];
		copy_fields(buf, src);
		return GEN_KNOWN | wb->d[ALONE - PRE + (rel & (PRE - 1))];
	}
	if (bpf_probe_read_user(buf, n, (const void *)addr))
		return -1;
	return 0;
}

static long step(u32 i, void *vctx)
{
	struct walk *w = vctx;
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 1;
#ifdef PYWALK_RESTART
	if (w->flags & (S_FAULT | S_INVALID)) {
		// The walk failed before its first frame (fail): start over from
		// the outer cframe's frame, once.
		u64 cf = w->alt_cf, outer = 0, top = 0;
		w->alt_cf = 0;
		if (read_u64(&outer, cf + cfg.cframe_previous) || !outer ||
		    read_u64(&top, outer + (u64)(u32)cfg.cframe_current) || !top)
			return 1;
		w->flags = 0;
		w->addr = top;
		w->last_shim = 0;
	}
#endif
	u64 addr = w->addr;
	if (addr == 0) {
		w->done = 1;
		return 1;
	}
	struct fhead fh = {};
	int got = frame_at(w, addr, &fh);
	if (got < 0) {
		return fail(w, S_FAULT);
	}
	u64 *buf = fh.b;
	s8 gst = (s8)(got & 0xff);
	u8 gok = (got & GEN_KNOWN) != 0;
	s64 rel = cfg.gen_state_rel;
	w->hops++;
	u64 prev = buf[(cfg.frame_previous >> 3) & (FBUF_WORDS - 1)];
	u64 code = buf[(cfg.frame_code >> 3) & (FBUF_WORDS - 1)];
	u8 *bytes = (u8 *)buf;
	if (prev == addr) {
		return fail(w, S_INVALID);
	}
	w->last = addr;
	u32 fflags = 0;
	s32 lasti;
	if (cfg.frame_objects) {
		// 3.10: a PyFrameObject; every Python call has its own C evaluator.
		if (w->frame_type && buf[(cfg.ob_type >> 3) & (FBUF_WORDS - 1)] != w->frame_type) {
			return fail(w, S_INVALID);
		}
		lasti = ((s32 *)buf)[(cfg.frame_instr >> 2) & (FBUF_WORDS * 2 - 1)];
		fflags = FR_ENTRY;
		if (cfg.frame_gen && buf[(cfg.frame_gen >> 3) & (FBUF_WORDS - 1)])
			fflags |= FR_GEN; // f_gen: the frame of a running generator
		w->last_shim = 0;
	} else {
		u8 owner = bytes[cfg.frame_owner & (FBUF_WORDS * 8 - 1)];
		if (owner > cfg.owner_max || owner == 2) {
			// 2 (FRAME_OBJECT) is a frame copied out after its exit: never on a live chain.
			return fail(w, S_INVALID);
		}
		if (cfg.owner_skip && owner >= cfg.owner_skip) {
			// A shim (C-stack entry frame, interpreter or base frame): the
			// Python frame recorded just before it was entered from C, and
			// the first shim below it is its run's link.
			if (w->depth > 0) {
				struct frame *pf = &s->frames[(w->depth - 1) & (MAX_FRAMES - 1)];
				if (!(pf->flags & FR_ENTRY) && w->nlinks < MAX_LINKS) {
					s->links[w->nlinks & (MAX_LINKS - 1)] = addr;
					w->nlinks++;
				}
				pf->flags |= FR_ENTRY;
			}
			w->last_shim = 1;
			w->addr = prev;
			return 0;
		}
		w->last_shim = 0;
		if (cfg.code_tagged)
			code &= ~3ULL;
		if (code == 0 && w->depth == 0) {
			// The newest frame is still being pushed (3.15 links it before
			// setting f_executable): the thread is at its caller's call.
			w->addr = prev;
			return 0;
		}
		if (owner == 1) {
			fflags |= FR_GEN;
			if (cfg.gen_state_rel) {
				s8 state = gst;
				if (!gok && bpf_probe_read_user(&state, 1, (const void *)(addr + rel))) {
					return fail(w, S_FAULT);
				}
				if (state != cfg.gen_executing && w->hops > 1) {
					// Reached through a callee's previous but not running:
					// a torn link. (The thread's current frame itself may
					// be a generator between its yield and the switch to
					// its caller: still the stack at this instant.)
					return fail(w, S_INVALID);
				}
			}
		}
		if (cfg.frame_is_entry >= 0 && bytes[cfg.frame_is_entry & (FBUF_WORDS * 8 - 1)])
			fflags |= FR_ENTRY;
		u64 instr = buf[(cfg.frame_instr >> 3) & (FBUF_WORDS - 1)];
		s64 off = (s64)(instr - code - cfg.code_adaptive) >> 1;
		lasti = (off < -1 || off > 0x7fffffff) ? -1 : (s32)off;
	}
	if (code == 0) {
		return fail(w, S_INVALID);
	}
	if (code != w->code_ok) {
		u32 slot = (u32)((code >> 4) ^ (code >> 12) ^ (code >> 20)) & (CODE_SLOTS - 1);
		u64 *seen = bpf_map_lookup_elem(&codes_ok, &slot);
		if (!seen || *seen != code) {
			u64 typ = 0;
			if (read_u64(&typ, code + cfg.ob_type)) {
				return fail(w, S_FAULT);
			}
			if (typ != w->code_type) {
				return fail(w, S_INVALID);
			}
			if (seen)
				*seen = code;
		}
		w->code_ok = code;
	}
	if (w->depth >= cfg.max_frames || w->depth >= MAX_FRAMES) {
		w->flags |= S_TRUNCATED;
		return 1;
	}
	struct frame *f = &s->frames[w->depth & (MAX_FRAMES - 1)];
	f->code = code;
	f->lasti = lasti;
	f->flags = fflags;
	w->hash = mix(mix(w->hash, code), (u64)(u32)lasti | (u64)fflags << 32);
	w->last_entry = (fflags & FR_ENTRY) != 0;
	w->last_gen = (fflags & FR_GEN) != 0;
	w->last_code = code;
	w->depth++;
	w->addr = prev;
	if (prev == 0)
		w->done = 1;
	return prev == 0;
}

// in_sub says whether thread state ts belongs to a sub-interpreter (its
// interpreter's id is not the main one's, 0).
static __always_inline u8 in_sub(u64 ts)
{
	u64 interp = 0, id = 0;
	if (!cfg.tstate_interp || !cfg.interp_id)
		return 0;
	if (read_u64(&interp, ts + cfg.tstate_interp) || !interp || read_u64(&id, interp + cfg.interp_id))
		return 0;
	return id != 0;
}

// Events of a thread-state lookup that user space counts.
struct pywalk_ev {
	u32 mapstale; // a map entry whose thread state belongs to another thread
	u32 tlsbad;   // a TLS/TSD candidate that failed its check
	u32 mapped;   // pywalk_lookup: the state came from the map by tid
};

// The walk between its chains (a sub-interpreter's, then its callers'),
// per CPU: the walk is handed to bpf_loop from there, so the verifier
// knows nothing of its fields and checks the frame step once.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct walk);
} walks SEC(".maps");

// pywalk_chain walks the frame chain from top, thread state ts's, into the
// per-CPU scratch sample, on from where the per-CPU walk stands: its first
// frame after walk_begin, or on below the frames walked (the callers of a
// sub-interpreter's chain, in the same hop budget). It returns whether the
// chain ended whole with nothing amiss. A global function, checked once
// with its arguments unknown (two walks inlined were checked for each
// state the thread-state lookup reached them in: 5x the instructions,
// seconds of load).
__attribute__((noinline)) int pywalk_chain(u64 top, u64 ts)
{
	u32 zero = 0;
	struct walk *wm = bpf_map_lookup_elem(&walks, &zero);
	if (!wm)
		return 0;
	if (wm->hops) { // a chain below the one walked
		wm->done = 0;
		wm->last_shim = 0;
		wm->alt_cf = 0;
	}
	wm->addr = top;
	struct walk w = *wm;
	bpf_loop(w.hops < MAX_HOPS ? MAX_HOPS - w.hops : 0, step, &w, 0);
	*wm = w;
	return !w.flags && w.done && whole(&w, ts);
}

// The addresses a walk compares with: cfg's, or the process's own.
struct pw_addrs {
	u64 code_type;
	u64 frame_type;
	u64 codegen;
	u64 main_interp;
};

static __always_inline void pw_addrs_get(struct pw_addrs *a)
{
	a->code_type = PW_CODE_TYPE;
	a->frame_type = PW_FRAME_TYPE;
	a->codegen = PW_CODEGEN;
	a->main_interp = PW_MAIN_INTERP;
	u32 tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	struct proc_addrs *pa = bpf_map_lookup_elem(&pyaddrs, &tgid);
	if (pa) {
		a->code_type = pa->code_type;
		a->frame_type = pa->frame_type;
		a->codegen = pa->codegen_addr;
		a->main_interp = pa->main_interp;
	}
}

// walk_begin readies the per-CPU walk for a stack's first chain, and puts
// the interpreter's code-object generation in the sample. cf: the cframe
// that holds the first chain's top frame (3.11/3.12), where a failed
// start begins again.
static __always_inline struct walk *walk_begin(struct sample *s, struct pw_addrs *a, u64 cf)
{
	u32 zero = 0;
	struct walk *wm = bpf_map_lookup_elem(&walks, &zero);
	if (!wm)
		return 0;
	__builtin_memset(wm, 0, sizeof(*wm));
	if (a->codegen && cfg.codegen_u32) {
		u32 g = 0;
		bpf_probe_read_user(&g, sizeof(g), (const void *)a->codegen);
		s->h.codegen = g;
	} else if (a->codegen) {
		read_u64(&s->h.codegen, a->codegen);
	}
	wm->code_type = a->code_type;
	wm->frame_type = a->frame_type;
#ifdef PYWALK_RESTART
	if (cfg.cframe_previous)
		wm->alt_cf = cf;
#endif
	return wm;
}

// attached reads the thread state the thread is attached to now (3.12+:
// _Py_tss_tstate; NULL while detached), checked to be the thread's own:
// its state (0: none, or failed its check) and, in *main, whether it is
// the main interpreter's, with *raw its frame field's value — known only
// where the state is read with its ids at once (cfg.ts_len): *main is 0
// otherwise.
static __always_inline u64 attached(u64 fs, u32 tid, struct pw_addrs *a, u8 *main, u64 *raw, struct pywalk_ev *ev)
{
	u64 cand = 0;
	*main = 0;
	if (!fs || read_u64(&cand, fs + PW_ATT_OFF) || !cand)
		return 0;
	u32 zero = 0;
	struct tsview *v = cfg.ts_len ? bpf_map_lookup_elem(&tsv, &zero) : 0;
	if (v) {
		u32 n = cfg.ts_len;
		if (n > sizeof(v->w))
			n = sizeof(v->w);
		if (bpf_probe_read_user(v->w, n, (const void *)(cand + cfg.ts_lo)))
			return 0;
		if (TSV(v, cfg.tstate_thread_id) != fs || TSV(v, cfg.tstate_native_tid) != tid) {
			ev->tlsbad++;
			return 0;
		}
		*main = a->main_interp && TSV(v, cfg.tstate_interp) == a->main_interp;
		*raw = TSV(v, cfg.tstate_frame);
		return cand;
	}
	u64 id = 0, nt = 0;
	if (read_u64(&id, cand + cfg.tstate_thread_id) || id != fs ||
	    (cfg.tstate_native_tid && (read_u64(&nt, cand + cfg.tstate_native_tid) || nt != tid))) {
		ev->tlsbad++;
		return 0;
	}
	*raw = 0;
	return cand;
}

// pywalk_lookup finds thread tid's state (fsbase fs) without the attached
// one: from the map by tid (checked: a tid may be reused), through the
// runtime's own per-thread pointer (brand-new threads are walked from
// their first sample), or from the map by fsbase; 0: none. It marks how in
// the scratch sample's flags and ev (mapped: by tid). A global function,
// verified once: inlined, its branches multiplied the walk's.
__attribute__((noinline)) u64 pywalk_lookup(u32 tid, u64 fs, struct pywalk_ev *ev)
{
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s || !ev)
		return 0;
	u64 tstate = 0;
	u64 key = tid;
	u64 *tsp = bpf_map_lookup_elem(&tstates, &key);
	if (tsp)
		tstate = *tsp;
	if (tstate && cfg.tstate_native_tid) {
		u64 nt = 0;
		if (read_u64(&nt, tstate + cfg.tstate_native_tid) || nt != tid) {
			ev->mapstale++;
			tstate = 0;
		}
	}
	ev->mapped = tstate != 0;
	if (!tstate && fs && PW_TLS_N) {
		for (int i = 0; i < 2; i++) {
			if (i >= PW_TLS_N)
				break;
			u64 cand = 0;
			if (read_u64(&cand, fs + PW_TLS_OFF(i)) || !cand)
				continue;
			u64 id = 0;
			if (read_u64(&id, cand + cfg.tstate_thread_id) || id != fs) {
				ev->tlsbad++;
				continue;
			}
			if (cfg.tstate_native_tid) {
				u64 nt = 0;
				if (read_u64(&nt, cand + cfg.tstate_native_tid) || nt != tid) {
					ev->tlsbad++;
					continue;
				}
			}
			tstate = cand;
			s->h.flags |= S_BYTLS;
			break;
		}
	}
	if (!tstate && fs) {
		key = fs;
		tsp = bpf_map_lookup_elem(&tstates, &key);
		if (tsp && *tsp) {
			u64 id = 0;
			if (read_u64(&id, *tsp + cfg.tstate_thread_id) || id != fs) {
				ev->mapstale++;
			} else {
				tstate = *tsp;
				s->h.flags |= S_MAPKEY_FS;
			}
		}
	}
	return tstate;
}

// pywalk fills s (its header zeroed but for time, tid and cpu) with the
// current thread's Python stack: the thread state it is attached to, if
// the main interpreter's (3.12+: the common case, no map lookup), else
// the one from the map (by tid, checked) or through the thread's TLS/TSD,
// then the frame chain; the verdict is in s->h.flags, the stack's
// identity in s->h.id.
static __always_inline void pywalk(struct sample *s, u32 tid, struct pywalk_ev *ev)
{
	struct pw_addrs a = {};
	pw_addrs_get(&a);
	// A direct load from the BTF-typed task (no helper call).
	struct task_struct___kwalk *task = (struct task_struct___kwalk *)bpf_get_current_task_btf();
	u64 fs = task->thread.fsbase;
	// The thread state the thread is attached to now (3.12+): another
	// than its bound one while it runs a sub-interpreter's code (user
	// space keys a thread to its state in the lowest interpreter, the one
	// it started in), whose frames then lie on top of the bound state's
	// (the calls that entered the sub-interpreter). NULL while detached:
	// the bound state is the stack. (The gilstate TSD slot follows the
	// attached state on 3.12+: it finds no caller.) Attached to the main
	// interpreter, it is the whole stack: the lookups below are skipped.
	u64 att = 0, raw = 0;
	u8 att_main = 0;
	if (PW_ATT_N)
		att = attached(fs, tid, &a, &att_main, &raw, ev);
	u64 tstate = 0, below = 0;
	u8 orphan = 0; // a sub-interpreter's state whose callers are not known
	u64 top = 0, cf = 0;
	if (att_main) {
		tstate = att;
		s->h.flags |= S_BYTLS;
		if (top_from(raw, &top, &cf)) {
			s->h.tstate = tstate;
			s->h.flags |= S_FAULT;
			return;
		}
	} else {
		tstate = pywalk_lookup(tid, fs, ev);
		u8 mapped = ev->mapped != 0;
		if (PW_ATT_N) {
			// Walked first: the attached state, then the bound one below it.
			if (att && att != tstate) {
				below = tstate;
				tstate = att;
			}
			if (tstate && !below && !(s->h.flags & S_MAPKEY_FS) && !mapped)
				orphan = in_sub(tstate);
		}
		if (!tstate) {
			s->h.flags |= S_NOPY;
			return;
		}
		if (top_frame(tstate, &top, &cf)) {
			s->h.tstate = tstate;
			s->h.flags |= S_FAULT;
			return;
		}
		if (!top && below) {
			// Attached to a sub-interpreter with no frame yet: the bound
			// state's stack is the thread's.
			tstate = below;
			below = 0;
			if (top_frame(tstate, &top, &cf)) {
				s->h.tstate = tstate;
				s->h.flags |= S_FAULT;
				return;
			}
		}
	}
	s->h.tstate = tstate;
	if (!top) {
		s->h.flags |= S_EMPTY;
		return;
	}

	if (!walk_begin(s, &a, cf))
		return;
	int whole_ = pywalk_chain(top, tstate);
	if (whole_ && below) {
		// The sub-interpreter's chain is whole: its callers are the
		// bound state's frames.
		if (top_frame(below, &top, &cf))
			s->h.flags |= S_FAULT;
		else if (top)
			whole_ = pywalk_chain(top, below);
	}
	u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&walks, &zero);
	if (!w)
		return;
	s->h.depth = w->depth;
	s->h.hops = w->hops;
	s->h.nlinks = w->nlinks;
	s->h.last = w->last;
	u32 flags = w->flags | (s->h.flags & S_FAULT);
	if (!flags && !w->done)
		flags |= S_TRUNCATED; // MAX_HOPS visited and the chain goes on
	if (!flags && w->done)
		flags |= whole_ && !orphan ? S_COMPLETE : S_TRUNCATED; // else ended elsewhere, or in a sub-interpreter: callers missing
	s->h.flags |= flags;
	// The process is in the identity: the same code addresses in two
	// processes of a set may be other code (each worker's own, compiled
	// after its fork where its sibling's is), and each stack is sent, and
	// named through its own process's memory, once per process.
	if (flags & (S_COMPLETE | S_TRUNCATED))
		s->h.id = mix(mix(mix(w->hash, s->h.codegen), s->h.tgid), (u64)(flags & (S_COMPLETE | S_TRUNCATED)) << 32 | w->depth);
}

// ---- Sending stacks once ----

#define BPF_RB_NO_WAKEUP 1
// pywalk_scratch walks thread tid into the per-CPU scratch sample (the
// caller has reset it: pywalk_reset) and returns the lookup's events,
// mapstale | tlsbad << 16. A global function: the verifier checks it
// once, on its own, where inlined it was checked again for every state
// its caller reached it in (offcpu's switch-out on 3.11: half a million
// instructions, half the kernel's limit, ~2 s of load).
__attribute__((noinline)) int pywalk_scratch(u32 tid)
{
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	struct pywalk_ev ev = {};
	pywalk(s, tid, &ev);
	return (int)((ev.mapstale & 0xffff) | (ev.tlsbad << 16));
}

// pywalk_events unpacks pywalk_scratch's return.
static __always_inline void pywalk_events(int r, struct pywalk_ev *ev)
{
	ev->mapstale = (u32)r & 0xffff;
	ev->tlsbad = (u32)r >> 16;
}

#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

// pywalk_reset readies s for a walk of thread tid at now.
static __always_inline void pywalk_reset(struct sample *s, u32 tid, u64 now)
{
	s->h.time = now;
	s->h.id = 0;
	s->h.tid = tid;
	s->h.tgid = (u32)(bpf_get_current_pid_tgid() >> 32);
	s->h.nlinks = 0;
	s->h.cpu = bpf_get_smp_processor_id();
	s->h.flags = 0;
	s->h.depth = 0;
	s->h.hops = 0;
	s->h.tstate = 0;
	s->h.codegen = 0;
	s->h.last = 0;
}

// The counter slots pywalk_send adds to, in this order from a program's
// base slot (its per-CPU counters map holds PYC_N slots from there).
enum {
	PYC_WALKED = 0, // switch-outs/events whose whole stack was walked
	PYC_TRUNC,      // walked, deeper than the walker goes (or callers missing)
	PYC_FAULT,      // a read of user memory failed (page not present)
	PYC_INVALID,    // a check failed (torn chain)
	PYC_NOPY,       // no thread state found for the thread
	PYC_EMPTY,      // a thread state without a frame
	PYC_NEW,        // distinct stacks sent to user space
	PYC_LOST,       // the ring was full: a stack not sent (its events unnamed)
	PYC_N,
};

// The maps pywalk_send needs, for a program to declare: the hashes of the
// stacks sent already (least recently used ones are forgotten and sent
// again: harmless) and the ring they go through.
#define PYWALK_SEND_MAPS(seen, ring, ring_bytes)           \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);       \
		__uint(max_entries, 16384);                \
		__type(key, u64);                          \
		__type(value, u8);                         \
	} seen SEC(".maps");                               \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_RINGBUF);        \
		__uint(max_entries, ring_bytes);           \
	} ring SEC(".maps")

// pywalk_send walks the current thread's Python stack and returns its hash
// (0: no stack walked), sending the stack (struct sample, kwalk.Decode)
// through ring the first time seen does not know it — keyed all the same
// when the ring is full (user space counts those events unnamed). The
// walk's verdict goes to *flags when flags is not NULL; counters[base +
// PYC_*] count what happened.
static __always_inline u64 pywalk_send(u32 tid, u64 now, u32 *flags, void *seen, void *ring, u64 ring_flags,
				       void *counters, u32 base)
{
	u32 zero = 0;
	struct sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	pywalk_reset(s, tid, now);
	pywalk_scratch(tid);
	u32 f = s->h.flags;
	if (flags)
		*flags = f;
	if (f & S_COMPLETE)
		counter_add(counters, base + PYC_WALKED, 1);
	if (f & S_TRUNCATED)
		counter_add(counters, base + PYC_TRUNC, 1);
	if (f & S_FAULT)
		counter_add(counters, base + PYC_FAULT, 1);
	if (f & S_INVALID)
		counter_add(counters, base + PYC_INVALID, 1);
	if (f & S_NOPY)
		counter_add(counters, base + PYC_NOPY, 1);
	if (f & S_EMPTY)
		counter_add(counters, base + PYC_EMPTY, 1);
	u64 id = s->h.id;
	if (!id || s->h.depth == 0)
		return 0;
	if (bpf_map_lookup_elem(seen, &id))
		return id;
	u32 d = s->h.depth;
	if (d > MAX_FRAMES)
		d = MAX_FRAMES;
	u64 size = sizeof(struct sample_hdr) + (u64)d * sizeof(struct frame);
	if (size > sizeof(struct sample))
		size = sizeof(struct sample);
	if (bpf_ringbuf_output(ring, s, size, ring_flags)) {
		counter_add(counters, base + PYC_LOST, 1);
		return id;
	}
	u8 one = 1;
	bpf_map_update_elem(seen, &id, &one, BPF_ANY);
	counter_add(counters, base + PYC_NEW, 1);
	return id;
}

#endif
