package pyframes

import (
	"errors"
	"fmt"
	"strings"
)

// asyncio on 3.12 and 3.13: no AsyncioDebug section and no per-thread task
// lists. What asyncio.all_tasks() reads is reachable from sys.modules:
// asyncio.tasks' globals _scheduled_tasks (a WeakSet whose .data is a set of
// weakrefs to the tasks), _eager_tasks (a set of tasks) and _current_tasks
// (a dict loop → running task). Those three objects are the C _asyncio
// module's own (asyncio.tasks imports them from it). Each task is read as a
// C TaskObj with the offsets of the table below.
//
// What cannot be reconstructed exactly, and is said so in Limits:
//   - a task's thread: a TaskObj does not record it (3.14 links each task
//     into its thread's list). A thread's running task is the one whose
//     coroutine's frame (held inside the coroutine object) is on that
//     thread's frame chain: the frame's address, not its code, which two
//     threads running tasks of one coroutine function share.
//   - awaited-by: 3.12/3.13 keep no awaiter links. It is rebuilt from each
//     task's task_fut_waiter (the future its step is blocked on): a Task it
//     awaits directly, or the children of the gather() future it awaits.
//     Tasks awaited through other futures (TaskGroup, wait(), shield())
//     show no awaiter.
//   - pure-Python tasks (asyncio.tasks._PyTask, or a loop's task factory
//     not based on _asyncio.Task): listed by name only when their layout is
//     unknown (Error says so).

// legacyAsyncLayout is one version's offsets (x86_64, GIL build).
type legacyAsyncLayout struct {
	source string
	// TaskObj (Modules/_asynciomodule.c): FutureObj_HEAD(task), then
	// task_fut_waiter, task_coro, task_name, task_context, … . futState:
	// the head's fut_state (an int: PENDING 0, CANCELLED 1, FINISHED 2).
	taskSize, taskFutWaiter, taskCoro, taskName, futState uint64
	// PyGenObject / PyCoroObject (Include/internal/pycore_genobject.h,
	// _PyGenObject_HEAD): int8 gi_frame_state, then the embedded frame.
	genFrameState, genIFrame uint64
	// _PyInterpreterFrame.stacktop (int): localsplus[stacktop-1] is the
	// object a suspended coroutine awaits (genobject.c _PyGen_yf).
	frameStackTop uint64
	// PySetObject {fill, used, mask, table}, PyWeakReference.wr_object,
	// PyTypeObject.tp_base.
	setUsed, setMask, setTable, weakrefObject, typeBase uint64
	states                                              frameStates
	// 3.12 has no SUSPENDED_YIELD_FROM state: a suspended coroutine awaits
	// something when the instruction after prev_instr is RESUME (or
	// INSTRUMENTED_RESUME) with oparg ≥ 2 (after yield from / await).
	resumeOps [2]byte
}

// legacyAsyncLayouts: field order from CPython's sources at v3.12.1 and
// v3.13.0 (Modules/_asynciomodule.c TaskObj, pycore_genobject.h,
// pycore_frame.h, setobject.h, weakrefobject.h); every offset measured on
// this machine kind's pyenv 3.12.1 / 3.13.0 with ctypes
// (testdata/targets/asyncio_layout.py, TestAsyncioLegacyLayout). 3.13 made
// the future's dict and weakref list managed, so TaskObj shrank by 16 bytes.
var legacyAsyncLayouts = map[int]legacyAsyncLayout{
	12: {source: "CPython v3.12.1 sources; measured live on pyenv 3.12.1",
		taskSize: 176, taskFutWaiter: 128, taskCoro: 136, taskName: 144, futState: 88,
		genFrameState: 67, genIFrame: 72, frameStackTop: 64,
		setUsed: 24, setMask: 32, setTable: 40, weakrefObject: 16, typeBase: 256,
		// genobject.h 3.12: CREATED -2, SUSPENDED -1, EXECUTING 0, COMPLETED 1, CLEARED 4.
		states:    frameStates{created: -2, suspended: -1, yieldFrom: -1, executing: 0},
		resumeOps: [2]byte{151, 240}},
	13: {source: "CPython v3.13.0 sources; measured live on pyenv 3.13.0",
		taskSize: 144, taskFutWaiter: 112, taskCoro: 120, taskName: 128, futState: 96,
		genFrameState: 67, genIFrame: 72, frameStackTop: 64,
		setUsed: 24, setMask: 32, setTable: 40, weakrefObject: 16, typeBase: 256,
		// 3.13: CREATED -3, SUSPENDED -2, SUSPENDED_YIELD_FROM -1, EXECUTING 0.
		states: frameStates{created: -3, suspended: -2, yieldFrom: -1, executing: 0}},
}

// LegacyAsyncLimits are the per-field limits of a 3.12/3.13 task read.
var LegacyAsyncLimits = []string{
	"tasks: from asyncio.tasks._scheduled_tasks (weak set) and _eager_tasks, as asyncio.all_tasks() reads them (done and cancelled tasks left out), for every loop and thread together",
	"thread_id: a task does not record its thread before 3.14 (0 here means unknown, not an exited thread); a thread's running task is the one whose coroutine's own frame (by address) is on the thread's frame chain when its stack is read (none when it was between two steps of its task then), and a loop is seen only while one of its tasks runs",
	"awaited_by: rebuilt from each task's _fut_waiter (a Task it awaits, or the children of the gather() it awaits); tasks awaited through other futures (TaskGroup, wait(), shield()) show no awaiter",
}

const maxWeakSet = 1 << 20 // slots of the task sets read

// legacyTaskType reports whether tp is _asyncio.Task or a subclass of it
// (so the TaskObj layout applies), walking tp_base.
func (ar *asyncReader) legacyTaskType(tp uint64) bool {
	r := &ar.p.objs
	for i := 0; tp != 0 && i < 16; i++ {
		if ar.typeName(tp) == "_asyncio.Task" {
			return true
		}
		var err error
		if tp, err = r.u64(tp + ar.legacy.typeBase); err != nil {
			return false
		}
	}
	return false
}

// asyncioTasksLegacy is AsyncioTasks for 3.12 and 3.13.
func (p *Process) asyncioTasksLegacy(lt legacyAsyncLayout) (*AsyncSnapshot, error) {
	r, l := &p.objs, p.Layout
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil || interp == 0 {
		return nil, fmt.Errorf("no interpreter: %w", err)
	}
	modules, err := r.u64(interp + l.InterpModules)
	if err != nil || modules == 0 {
		return nil, fmt.Errorf("no sys.modules: %w", err)
	}
	mod, err := r.dictGetStr(modules, "asyncio.tasks")
	if err != nil {
		return nil, ErrAsyncioNotImported
	}
	if imported, err := r.dictGetStr(modules, "_asyncio"); err != nil || imported == 0 {
		return nil, fmt.Errorf("%w (asyncio.tasks without the C _asyncio module: pure-Python tasks are not read)", ErrAsyncioNotImported)
	}
	globals, err := r.u64(mod + l.ModuleDict)
	if err != nil || globals == 0 {
		return nil, fmt.Errorf("asyncio.tasks module 0x%x: no __dict__: %w", mod, err)
	}
	items, err := r.dictItems(globals)
	if err != nil {
		return nil, fmt.Errorf("asyncio.tasks globals: %w", err)
	}
	ar := &asyncReader{p: p, st: lt.states, typeNames: map[uint64]string{}, legacy: &lt,
		giIFrame: lt.genIFrame, giState: lt.genFrameState, frameSP: lt.frameStackTop,
		setUsed: lt.setUsed, setTable: lt.setTable, setMask: lt.setMask}
	snap := &AsyncSnapshot{Section: "asyncio.tasks module state (" + lt.source + ")", Limits: LegacyAsyncLimits}

	var addrs []uint64
	seen := map[uint64]bool{}
	add := func(t uint64) {
		if t != 0 && !seen[t] && len(addrs) < MaxTasks {
			seen[t] = true
			addrs = append(addrs, t)
		}
	}
	// _scheduled_tasks: WeakSet → .data (set of weakrefs) → referents.
	if ws, err := r.findStrKey(items, "_scheduled_tasks"); err == nil {
		data, err := r.getAttr(ws, "data")
		if err != nil {
			return nil, fmt.Errorf("asyncio.tasks._scheduled_tasks 0x%x: no .data: %w", ws, err)
		}
		refs, err := ar.setKeysN(data, maxWeakSet)
		if err != nil {
			snap.Torn++
			snap.Errors = append(snap.Errors, "_scheduled_tasks: "+err.Error())
		}
		var buf [48]byte // PyWeakReference's header and wr_object (free-threaded: 16 more)
		for _, ref := range refs {
			// A weakref freed since the set was read is torn, not followed.
			if err := r.mem.Read(ref, buf[:]); err != nil || !strings.HasPrefix(ar.typeName(le64(buf[:], l.ObType)), "weakref") {
				snap.Torn++
				continue
			}
			add(le64(buf[:], lt.weakrefObject)) // a dead ref holds None: dropped below
		}
	}
	if es, err := r.findStrKey(items, "_eager_tasks"); err == nil {
		keys, err := ar.setKeysN(es, maxWeakSet)
		if err != nil {
			snap.Torn++
			snap.Errors = append(snap.Errors, "_eager_tasks: "+err.Error())
		}
		for _, k := range keys {
			add(k)
		}
	}
	running := map[uint64]uint64{} // task → loop
	if ct, err := r.findStrKey(items, "_current_tasks"); err == nil {
		cur, err := r.dictItems(ct)
		if err != nil {
			snap.Torn++
			snap.Errors = append(snap.Errors, "_current_tasks: "+err.Error())
		}
		for _, e := range cur {
			running[e.value] = e.key
			add(e.value)
		}
	}

	byAddr := map[uint64]int{}
	waiters := map[uint64]uint64{} // task → its fut_waiter
	for _, a := range addrs {
		tp, err := r.typeOf(a)
		if err != nil {
			snap.Torn++
			continue
		}
		tn := ar.typeName(tp)
		if tn == "NoneType" {
			continue // a weakref whose task is gone
		}
		if !strings.Contains(tn, "Task") {
			snap.Torn++ // the memory was freed and reused since the set was read
			continue
		}
		t := AsyncTask{Addr: a, IsTask: true}
		_, t.Running = running[a]
		if !ar.legacyTaskType(tp) {
			t.Err = fmt.Sprintf("a %q, not an _asyncio.Task: its fields are not read", tn)
			byAddr[a] = len(snap.Tasks)
			snap.Tasks = append(snap.Tasks, t)
			continue
		}
		w, done, err := ar.legacyTask(a, &t)
		if done {
			continue // finished or cancelled, still referenced: not in all_tasks()
		}
		if t.Name == "" {
			snap.Torn++ // no name: freed, or not initialised yet
			continue
		}
		if err != nil {
			t.Err = err.Error()
		}
		if w != 0 {
			waiters[a] = w
		}
		byAddr[a] = len(snap.Tasks)
		snap.Tasks = append(snap.Tasks, t)
	}
	// Awaited-by from the awaiters' side.
	for awaiter, w := range waiters {
		var awaited []uint64
		if _, ok := byAddr[w]; ok {
			awaited = []uint64{w}
		} else if tp, err := r.typeOf(w); err == nil && ar.typeName(tp) == "_GatheringFuture" {
			kids, err := ar.listItems(w, "_children")
			if err != nil {
				snap.Errors = append(snap.Errors, fmt.Sprintf("gather future 0x%x: %v", w, err))
			}
			awaited = kids
		}
		for _, k := range awaited {
			if i, ok := byAddr[k]; ok {
				snap.Tasks[i].AwaitedBy = append(snap.Tasks[i].AwaitedBy, awaiter)
			}
		}
	}
	// Each running task's thread: the thread whose frame chain holds the
	// task's coroutine frame, by address (it lives in the coroutine
	// object: one per task). By code, two threads running tasks of one
	// coroutine function were told apart only by luck: a task read as
	// running while its thread was between steps was put on the other.
	frameOf := map[uint64]uint64{} // coroutine frame address → running task
	for task := range running {
		if i, ok := byAddr[task]; ok && len(snap.Tasks[i].Coroutines) > 0 && snap.Tasks[i].Coroutines[0].Addr != 0 {
			frameOf[snap.Tasks[i].Coroutines[0].Addr] = task
		}
	}
	refs, err := p.ThreadRefs()
	if err != nil {
		return nil, err
	}
	for _, ref := range refs {
		if ref.Interp != 0 {
			continue
		}
		th := AsyncThread{ThreadID: ref.ThreadID, NativeID: ref.NativeID, Tstate: ref.Addr, Tasks: -1}
		if len(frameOf) > 0 {
			frames, _, _, err := p.Stack(ref.Addr, Options{Retries: 1})
			if err != nil && !errors.Is(err, ErrTorn) {
				th.Err = err.Error()
			}
			// The innermost: a loop nested inside a task (nest_asyncio)
			// runs its own task above the outer one.
			for _, f := range frames {
				if task, ok := frameOf[f.Addr]; ok {
					th.RunningLoop, th.RunningTask = running[task], task
					break
				}
			}
		}
		snap.Threads = append(snap.Threads, th)
	}
	for _, t := range snap.Tasks {
		if t.Err != "" && !strings.Contains(t.Err, "not an _asyncio.Task") {
			snap.Torn++
		}
	}
	snap.Cycles = awaitCycles(snap.Tasks)
	return snap, nil
}

// legacyTask reads one TaskObj: name, coroutine chain; returns its
// fut_waiter, and whether it is done (finished or cancelled: then nothing
// else is read).
func (ar *asyncReader) legacyTask(addr uint64, t *AsyncTask) (uint64, bool, error) {
	lt, r := ar.legacy, &ar.p.objs
	if cap(ar.taskBuf) < int(lt.taskSize) {
		ar.taskBuf = make([]byte, lt.taskSize)
	}
	b := ar.taskBuf[:lt.taskSize]
	if err := r.mem.Read(addr, b); err != nil {
		return 0, false, err
	}
	if lt.futState != 0 && le32(b, lt.futState) != 0 {
		return 0, true, nil
	}
	var errs []string
	if name, err := ar.taskName(le64(b, lt.taskName)); err == nil {
		t.Name = name
	} else {
		errs = append(errs, "name: "+err.Error())
	}
	waiter := le64(b, lt.taskFutWaiter)
	if coro := le64(b, lt.taskCoro); coro != 0 {
		fr, awaiting, err := ar.coroChain(coro)
		t.Coroutines, t.Awaiting = fr, awaiting
		if err != nil {
			errs = append(errs, "coroutine: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return waiter, false, errors.New(strings.Join(errs, "; "))
	}
	return waiter, false, nil
}

// listItems reads the list held in obj's attribute attr.
func (ar *asyncReader) listItems(obj uint64, attr string) ([]uint64, error) {
	r, l := &ar.p.objs, ar.p.Layout
	lst, err := r.getAttr(obj, attr)
	if err != nil {
		return nil, err
	}
	if tp, err := r.typeOf(lst); err != nil || ar.typeName(tp) != "list" {
		return nil, fmt.Errorf("%s at 0x%x is not a list: %w", attr, lst, ErrTorn)
	}
	n, err := r.u64(lst + l.ListSize)
	if err != nil {
		return nil, err
	}
	if n > maxAwaitedBy {
		return nil, fmt.Errorf("%s: %d items: %w", attr, n, ErrTorn)
	}
	items, err := r.u64(lst + l.ListItems)
	if err != nil || n == 0 {
		return nil, err
	}
	raw := make([]byte, 8*n)
	if err := r.mem.Read(items, raw); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = le64(raw, uint64(8*i))
	}
	return out, nil
}

// legacyAwaited: what a suspended coroutine awaits on 3.12/3.13 (the top of
// its value stack while it is in a yield from / await); 0 when nothing.
func (ar *asyncReader) legacyAwaited(coro uint64, fr []byte, state int8) (uint64, error) {
	lt, r, l := ar.legacy, &ar.p.objs, ar.p.Layout
	if state != ar.st.yieldFrom {
		return 0, nil
	}
	if lt.resumeOps[0] != 0 {
		// 3.12: SUSPENDED covers plain yields too: check the RESUME oparg.
		var next [4]byte
		if err := r.mem.Read(le64(fr, l.FrameInstr), next[:]); err != nil {
			return 0, err
		}
		if (next[2] != lt.resumeOps[0] && next[2] != lt.resumeOps[1]) || next[3] < 2 {
			return 0, nil
		}
	}
	top := int64(int32(le32(fr, lt.frameStackTop)))
	if top < 1 || top > 1<<16 {
		return 0, fmt.Errorf("coroutine 0x%x: stack top %d: %w", coro, top, ErrTorn)
	}
	return r.u64(coro + ar.giIFrame + l.FrameLocalsplus + 8*uint64(top-1))
}
