package pyframes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pyobs/pyobs/internal/output"
)

// asyncio introspection (CPython 3.14+). The _asyncio module publishes the
// offsets a reader needs in its own ELF section, .AsyncioDebug
// (Modules/_asynciomodule.c: GENERATE_DEBUG_SECTION(AsyncioDebug,
// Py_AsyncioModuleDebugOffsets _AsyncioDebug)): 13 uint64, no cookie, no
// version. The section lives in the _asyncio extension (3.14 as Debian
// builds it) or in the python binary / libpython (3.15 sid, built in).
//
// Every C Task (and every subclass of _asyncio.Task) is linked into a
// circular llist: the list of the thread that created it
// (_PyThreadStateImpl.asyncio_tasks_head) or, once that thread has exited,
// the interpreter's list. Pure-Python tasks (asyncio.tasks._PyTask) are not
// linked anywhere and cannot be found this way.

// AsyncioOffsets is Py_AsyncioModuleDebugOffsets.
type AsyncioOffsets struct {
	TaskSize, TaskName, TaskAwaitedBy, TaskIsTask, TaskAwaitedByIsSet, TaskCoro, TaskNode uint64
	InterpSize, InterpTasksHead                                                           uint64
	TstateSize, TstateRunningLoop, TstateRunningTask, TstateTasksHead                     uint64
}

// AsyncioDebugSize is sizeof(Py_AsyncioModuleDebugOffsets) in 3.14 and 3.15.
const AsyncioDebugSize = 13 * 8

// ErrAsyncioNotImported: the target has not imported asyncio (no _asyncio
// module, so no task lists to read).
var ErrAsyncioNotImported = errors.New("asyncio not imported")

// ParseAsyncioOffsets validates the section's bytes: sizes must be sane and
// every offset must lie inside its struct.
func ParseAsyncioOffsets(b []byte) (*AsyncioOffsets, error) {
	if len(b) < AsyncioDebugSize {
		return nil, fmt.Errorf("AsyncioDebug: %d bytes, need %d", len(b), AsyncioDebugSize)
	}
	v := make([]uint64, 13)
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	o := &AsyncioOffsets{
		TaskSize: v[0], TaskName: v[1], TaskAwaitedBy: v[2], TaskIsTask: v[3], TaskAwaitedByIsSet: v[4], TaskCoro: v[5], TaskNode: v[6],
		InterpSize: v[7], InterpTasksHead: v[8],
		TstateSize: v[9], TstateRunningLoop: v[10], TstateRunningTask: v[11], TstateTasksHead: v[12],
	}
	type field struct {
		name        string
		off, width  uint64
		size        uint64
		structLabel string
	}
	fields := []field{
		{"task_name", o.TaskName, 8, o.TaskSize, "asyncio_task_object"},
		{"task_awaited_by", o.TaskAwaitedBy, 8, o.TaskSize, "asyncio_task_object"},
		{"task_is_task", o.TaskIsTask, 1, o.TaskSize, "asyncio_task_object"},
		{"task_awaited_by_is_set", o.TaskAwaitedByIsSet, 1, o.TaskSize, "asyncio_task_object"},
		{"task_coro", o.TaskCoro, 8, o.TaskSize, "asyncio_task_object"},
		{"task_node", o.TaskNode, 16, o.TaskSize, "asyncio_task_object"},
		{"asyncio_tasks_head", o.InterpTasksHead, 16, o.InterpSize, "asyncio_interpreter_state"},
		{"asyncio_running_loop", o.TstateRunningLoop, 8, o.TstateSize, "asyncio_thread_state"},
		{"asyncio_running_task", o.TstateRunningTask, 8, o.TstateSize, "asyncio_thread_state"},
		{"asyncio_tasks_head", o.TstateTasksHead, 16, o.TstateSize, "asyncio_thread_state"},
	}
	for _, s := range []struct {
		name string
		v    uint64
	}{{"asyncio_task_object", o.TaskSize}, {"asyncio_interpreter_state", o.InterpSize}, {"asyncio_thread_state", o.TstateSize}} {
		if s.v < 16 || s.v > maxStructSize {
			return nil, fmt.Errorf("AsyncioDebug: %s.size %d is implausible", s.name, s.v)
		}
	}
	for _, f := range fields {
		if f.off == 0 || f.off+f.width > f.size {
			return nil, fmt.Errorf("AsyncioDebug: %s.%s = %d does not fit in the struct (size %d)", f.structLabel, f.name, f.off, f.size)
		}
	}
	return o, nil
}

// FindAsyncioSection finds the .AsyncioDebug section among the mapped files
// (those whose name holds "python" or "_asyncio"): its address in the target
// and the file it is in. ok is false when no mapped file has it.
func FindAsyncioSection(pid int, maps []Mapping) (addr uint64, path string, ok bool) {
	for _, p := range candidates(maps) {
		base := filepath.Base(p)
		if !strings.Contains(base, "python") && !strings.Contains(base, "_asyncio") {
			continue
		}
		f, err := openMapped(pid, p, maps)
		if err != nil {
			continue
		}
		sec := f.Section(".AsyncioDebug")
		if sec == nil || sec.Addr == 0 || sec.Size < AsyncioDebugSize {
			f.Close()
			continue
		}
		bias, err := loadBias(f, p, maps)
		f.Close()
		if err != nil {
			continue
		}
		return sec.Addr + bias, p, true
	}
	return 0, "", false
}

// Frame states (Include/internal/pycore_frame.h). 3.14: CREATED -3,
// SUSPENDED -2, SUSPENDED_YIELD_FROM -1, EXECUTING 0, COMPLETED 1, CLEARED 4.
// 3.15 renumbered them: CREATED 0, SUSPENDED 1, SUSPENDED_YIELD_FROM 2,
// SUSPENDED_YIELD_FROM_LOCKED 3 (free-threaded only), EXECUTING 4, CLEARED 5.
type frameStates struct{ created, suspended, yieldFrom, executing int8 }

func frameStatesFor(minor int) (frameStates, bool) {
	switch minor {
	case 14:
		return frameStates{created: -3, suspended: -2, yieldFrom: -1, executing: 0}, true
	case 15:
		return frameStates{created: 0, suspended: 1, yieldFrom: 2, executing: 4}, true
	}
	return frameStates{}, false
}

// awaitedSlot: where a coroutine suspended in SUSPENDED_YIELD_FROM holds the
// object it awaits (the SEND receiver), counted down from its stackpointer.
// 3.14: stackpointer[-1] (genobject.c _PyGen_yf: _PyFrame_StackPeek).
// 3.15: stackpointer[-2]; [-1] then holds a NULL-tagged stackref (0x1).
// Both measured on sid 3.14.10 / 3.15.2 against cr_await (asyncio_tree.py).
func awaitedSlot(minor int) uint64 {
	if minor >= 15 {
		return 2
	}
	return 1
}

// Limits on one task walk: garbage or churn must not make it loop or grow.
const (
	MaxTasks     = 1 << 20
	maxCoroChain = 256
	maxAwaitedBy = 1 << 16
	maxTypeName  = 96
	maxTaskName  = 255 // as CPython's unwinder (asyncio.c parse_task_name)
)

// AsyncTask is one asyncio task as read.
type AsyncTask struct {
	Addr     uint64
	Name     string
	IsTask   bool
	ThreadID uint64 // the thread whose list holds it; 0: the interpreter's list (its thread exited)
	Running  bool   // the running task of its thread's running loop
	// Coroutines: the task's coroutine, then what it awaits while that is a
	// coroutine (or generator), outermost first. For the running task only
	// its own coroutine frame: what it calls is on the thread's stack.
	Coroutines []Frame
	// Awaiting: the type of the non-coroutine object the innermost
	// coroutine awaits (e.g. "_asyncio.FutureIter"); "" when none or unknown.
	Awaiting  string
	AwaitedBy []uint64 // tasks (or futures) awaiting this one
	Err       string   // what could not be read (torn by a concurrent change, most likely)
}

// AsyncThread is one thread state's asyncio view.
type AsyncThread struct {
	ThreadID    uint64
	NativeID    int
	Tstate      uint64
	RunningLoop uint64
	RunningTask uint64 // 0 unless a loop runs in this thread
	Tasks       int    // tasks in its list
	Err         string
}

// AsyncSnapshot is every task the lists held during the read.
type AsyncSnapshot struct {
	Section     string // the file whose .AsyncioDebug section was read
	Offsets     AsyncioOffsets
	Threads     []AsyncThread
	Tasks       []AsyncTask
	ExitedTasks int // tasks in the interpreter's list (threads that exited)
	// Torn counts what changed under the read: a list that broke off, a
	// task whose fields did not read back sane. The rest is still reported.
	Torn int
	// Retries: task-list walks redone because the list changed under them.
	Retries int
	// Cycles in the awaited-by graph, each as task addresses.
	Cycles [][]uint64
	// Limits: what this version's read cannot reconstruct, per field
	// (3.12/3.13); empty when the read is complete (3.14+).
	Limits []string
	// Errors: what broke off while reading the task sets (3.12/3.13).
	Errors []string
}

// asyncReader holds what one task walk needs.
type asyncReader struct {
	p         *Process
	o         *AsyncioOffsets
	st        frameStates
	giIFrame  uint64
	giState   uint64
	llNext    uint64
	setUsed   uint64
	setTable  uint64
	setMask   uint64
	frameSP   uint64
	typeNames map[uint64]string
	legacy    *legacyAsyncLayout // 3.12/3.13: no AsyncioDebug
	taskBuf   []byte
	genBuf    []byte
}

// debugFields re-reads the _Py_DebugOffsets table (3.14+ fields the Layout
// does not keep: gen_object, llist_node, set_object, frame stackpointer).
func (p *Process) debugFields() (map[string]uint64, error) {
	head := make([]byte, 16)
	if err := p.objs.mem.Read(p.Info.Runtime, head); err != nil {
		return nil, err
	}
	if !bytes.Equal(head[:8], DebugCookie) {
		return nil, ErrNoCookie
	}
	n := DebugTableSize(VersionHex(le64(head, 8)).Minor)
	if n == 0 {
		return nil, errors.New("no debug-offsets layout for this version")
	}
	tbl := make([]byte, n)
	if err := p.objs.mem.Read(p.Info.Runtime, tbl); err != nil {
		return nil, err
	}
	d, err := ParseDebugOffsets(tbl)
	if err != nil {
		return nil, err
	}
	return d.Fields, nil
}

// AsyncioUnsupportedError says why there is no task tree for this version.
type AsyncioUnsupportedError struct{ Version Version }

func (e *AsyncioUnsupportedError) Error() string {
	return fmt.Sprintf("task tree needs CPython 3.12+ (3.14+: AsyncioDebug; 3.12/3.13: asyncio module state); this is %s", e.Version)
}

// AsyncioTasks reads every asyncio task of the main interpreter: each
// thread's list and the interpreter's list of tasks of exited threads.
// It stops nothing: a task list that changes under the read is walked as far
// as it stays sane, and the breaks are counted in Torn.
func (p *Process) AsyncioTasks() (*AsyncSnapshot, error) {
	if v := p.Layout.Version; v.Major == 3 {
		if lt, ok := legacyAsyncLayouts[v.Minor]; ok {
			return p.asyncioTasksLegacy(lt.moved(p.Layout.objectHeaderGrowth()))
		}
	}
	ar, path, err := p.asyncSetup()
	if err != nil {
		return nil, err
	}
	o := ar.o
	snap := &AsyncSnapshot{Section: path, Offsets: *o}
	refs, err := p.ThreadRefs()
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{}
	interp, _ := p.objs.u64(p.Info.Runtime + p.Layout.RuntimeInterpretersHead)
	for _, ref := range refs {
		if ref.Interp != 0 {
			continue // subinterpreters: their own task lists are not walked yet
		}
		th := AsyncThread{ThreadID: ref.ThreadID, NativeID: ref.NativeID, Tstate: ref.Addr}
		th.RunningLoop, _ = p.objs.u64(ref.Addr + o.TstateRunningLoop)
		if th.RunningLoop != 0 {
			th.RunningTask, _ = p.objs.u64(ref.Addr + o.TstateRunningTask)
		}
		n, err := ar.walkList(ref.Addr+o.TstateTasksHead, ref.ThreadID, th.RunningTask, seen, snap)
		th.Tasks = n
		if err != nil {
			th.Err = err.Error()
			snap.Torn++
		}
		snap.Threads = append(snap.Threads, th)
	}
	if interp != 0 {
		n, err := ar.walkList(interp+o.InterpTasksHead, 0, 0, seen, snap)
		snap.ExitedTasks = n
		if err != nil {
			snap.Torn++
		}
	}
	for _, t := range snap.Tasks {
		if t.Err != "" {
			snap.Torn++
		}
	}
	snap.Cycles = awaitCycles(snap.Tasks)
	return snap, nil
}

// asyncSetup finds and checks the .AsyncioDebug section and the debug
// offsets a task walk needs (3.14+).
func (p *Process) asyncSetup() (*asyncReader, string, error) {
	v := p.Layout.Version
	st, ok := frameStatesFor(v.Minor)
	if !ok || v.Major != 3 {
		return nil, "", &AsyncioUnsupportedError{Version: v}
	}
	if imported, err := p.moduleImported("_asyncio"); err == nil && !imported {
		return nil, "", ErrAsyncioNotImported
	}
	maps, err := ReadMaps(p.Pid)
	if err != nil {
		return nil, "", err
	}
	addr, path, found := FindAsyncioSection(p.Pid, maps)
	if !found {
		return nil, "", fmt.Errorf("%w (no mapped file has an .AsyncioDebug section)", ErrAsyncioNotImported)
	}
	raw := make([]byte, AsyncioDebugSize)
	if err := p.objs.mem.Read(addr, raw); err != nil {
		return nil, "", fmt.Errorf("can't read .AsyncioDebug at 0x%x: %w", addr, err)
	}
	o, err := ParseAsyncioOffsets(raw)
	if err != nil {
		return nil, "", err
	}
	f, err := p.debugFields()
	if err != nil {
		return nil, "", fmt.Errorf("debug offsets: %w", err)
	}
	ar := &asyncReader{p: p, o: o, st: st, typeNames: map[uint64]string{},
		giIFrame: f["gen_object.gi_iframe"], giState: f["gen_object.gi_frame_state"], llNext: f["llist_node.next"],
		setUsed: f["set_object.used"], setTable: f["set_object.table"], setMask: f["set_object.mask"],
		frameSP: f["interpreter_frame.stackpointer"]}
	if ar.giIFrame == 0 || ar.giState == 0 || ar.frameSP == 0 || ar.setTable == 0 {
		return nil, "", errors.New("debug offsets lack the generator/frame fields a task walk needs")
	}
	return ar, path, nil
}

// moduleImported looks name up in the main interpreter's sys.modules.
func (p *Process) moduleImported(name string) (bool, error) {
	l, r := p.Layout, &p.objs
	interp, err := r.u64(p.Info.Runtime + l.RuntimeInterpretersHead)
	if err != nil || interp == 0 || l.InterpModules == 0 {
		return false, errors.New("no interpreter")
	}
	modules, err := r.u64(interp + l.InterpModules)
	if err != nil || modules == 0 {
		return false, errors.New("no sys.modules")
	}
	items, err := r.dictItems(modules)
	if err != nil {
		return false, err
	}
	if _, err := r.findStrKey(items, name); err != nil {
		return false, nil
	}
	return true, nil
}

// walkList walks one circular task list from its head (bounded, cycle-safe).
func (ar *asyncReader) walkList(head, threadID, running uint64, seen map[uint64]bool, snap *AsyncSnapshot) (int, error) {
	// A list that changes under the walk (a task unlinked, its memory reused)
	// is walked again, up to listRetries times; the last walk is kept.
	var n int
	var err error
	base := len(snap.Tasks)
	for attempt := 0; ; attempt++ {
		var added []uint64
		n, added, err = ar.walkOnce(head, threadID, running, seen, snap)
		if err == nil || attempt >= listRetries {
			return n, err
		}
		for _, a := range added {
			delete(seen, a)
		}
		snap.Tasks = snap.Tasks[:base]
		snap.Retries++
	}
}

const listRetries = 3

func (ar *asyncReader) walkOnce(head, threadID, running uint64, seen map[uint64]bool, snap *AsyncSnapshot) (int, []uint64, error) {
	r := &ar.p.objs
	var added []uint64
	node, err := r.u64(head + ar.llNext)
	if err != nil {
		return 0, nil, fmt.Errorf("can't read task list head 0x%x: %w", head, err)
	}
	n := 0
	visited := map[uint64]bool{}
	for node != head {
		if node == 0 {
			return n, added, fmt.Errorf("task list broke off (NULL link): %w", ErrTorn)
		}
		if visited[node] || len(snap.Tasks) >= MaxTasks {
			return n, added, fmt.Errorf("task list does not return to its head after %d tasks: %w", n, ErrTorn)
		}
		visited[node] = true
		task := node - ar.o.TaskNode
		t, next, err := ar.task(task)
		if err != nil {
			// A task we cannot read: its link can't be trusted either.
			return n, added, fmt.Errorf("task 0x%x: %w", task, err)
		}
		if !seen[task] {
			seen[task] = true
			t.ThreadID = threadID
			t.Running = running != 0 && running == task
			snap.Tasks = append(snap.Tasks, t)
			added = append(added, task)
			n++
		}
		node = next
	}
	return n, added, nil
}

// task reads one TaskObj (one read for the whole struct) and what it points to.
func (ar *asyncReader) task(addr uint64) (AsyncTask, uint64, error) {
	o, r := ar.o, &ar.p.objs
	if cap(ar.taskBuf) < int(o.TaskSize) {
		ar.taskBuf = make([]byte, o.TaskSize)
	}
	b := ar.taskBuf[:o.TaskSize]
	if err := r.mem.Read(addr, b); err != nil {
		return AsyncTask{}, 0, err
	}
	next := le64(b, o.TaskNode+ar.llNext)
	t := AsyncTask{Addr: addr, IsTask: b[o.TaskIsTask] != 0}
	tn := ar.typeName(le64(b, ar.p.Layout.ObType))
	if !strings.HasSuffix(tn, "Task") && !strings.Contains(tn, "Task") {
		// Not a task (freed, reused): the link it holds is garbage too.
		return t, 0, fmt.Errorf("object of type %q in a task list: %w", tn, ErrTorn)
	}
	var errs []string
	if name, err := ar.taskName(le64(b, o.TaskName)); err == nil {
		t.Name = name
	} else {
		errs = append(errs, "name: "+err.Error())
	}
	if by := le64(b, o.TaskAwaitedBy); by != 0 {
		if b[o.TaskAwaitedByIsSet] != 0 {
			keys, err := ar.setKeys(by)
			if err != nil {
				errs = append(errs, "awaited_by: "+err.Error())
			}
			t.AwaitedBy = keys
		} else {
			t.AwaitedBy = []uint64{by}
		}
	}
	if coro := le64(b, o.TaskCoro); coro != 0 {
		fr, awaiting, err := ar.coroChain(coro)
		t.Coroutines, t.Awaiting = fr, awaiting
		if err != nil {
			errs = append(errs, "coroutine: "+err.Error())
		}
	}
	t.Err = strings.Join(errs, "; ")
	return t, next, nil
}

// taskName: an int (the task counter: "Task-N") until get_name() turns it
// into a str, or a str.
func (ar *asyncReader) taskName(obj uint64) (string, error) {
	r := &ar.p.objs
	if obj == 0 {
		return "", errors.New("NULL name")
	}
	tp, err := r.typeOf(obj)
	if err != nil {
		return "", err
	}
	switch {
	case tp == r.types.long && tp != 0:
		v, ok, err := r.long(obj)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", errors.New("task counter wider than 64 bits")
		}
		return fmt.Sprintf("Task-%d", v), nil
	case tp == r.types.unicode && tp != 0:
		s, err := r.str(obj, maxTaskName)
		return output.Printable(s), err
	}
	return "", fmt.Errorf("name of type %q", ar.typeName(tp))
}

// setKeys reads a set's live keys (setentry {key, hash}; dummies have hash -1).
func (ar *asyncReader) setKeys(set uint64) ([]uint64, error) {
	return ar.setKeysN(set, maxAwaitedBy)
}

// setKeysN is setKeys for sets of up to limit slots.
func (ar *asyncReader) setKeysN(set uint64, limit uint64) ([]uint64, error) {
	r := &ar.p.objs
	hdr := make([]byte, max(ar.setUsed, ar.setTable, ar.setMask)+8)
	if err := r.mem.Read(set, hdr); err != nil {
		return nil, err
	}
	if tn := ar.typeName(le64(hdr, ar.p.Layout.ObType)); tn != "set" {
		return nil, fmt.Errorf("awaited_by is a %q, not a set: %w", tn, ErrTorn)
	}
	mask, table, used := le64(hdr, ar.setMask), le64(hdr, ar.setTable), le64(hdr, ar.setUsed)
	if mask+1 == 0 || mask+1 > limit || (mask+1)&mask != 0 || used > mask+1 {
		return nil, fmt.Errorf("set 0x%x: implausible mask %d / used %d: %w", set, mask, used, ErrTorn)
	}
	raw := make([]byte, 16*(mask+1))
	if err := r.mem.Read(table, raw); err != nil {
		return nil, err
	}
	var out []uint64
	for i := uint64(0); i <= mask; i++ {
		key, hash := le64(raw, 16*i), int64(le64(raw, 16*i+8))
		if key != 0 && hash != -1 {
			out = append(out, key)
		}
	}
	return out, nil
}

// typeName reads tp_name of a type object (cached per type address).
func (ar *asyncReader) typeName(tp uint64) string {
	if tp == 0 {
		return ""
	}
	if s, ok := ar.typeNames[tp]; ok {
		return s
	}
	r := &ar.p.objs
	s := "?"
	if np, err := r.u64(tp + ar.p.Layout.TypeName); err == nil && np != 0 {
		buf := make([]byte, maxTypeName)
		for n := len(buf); n >= 8; n /= 2 { // the name may end near a mapping's end
			if err := r.mem.Read(np, buf[:n]); err == nil {
				if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
					s = string(buf[:i])
				} else {
					s = string(buf[:n])
				}
				break
			}
		}
	}
	if len(ar.typeNames) < 4096 {
		ar.typeNames[tp] = s
	}
	return s
}

func isCoroType(name string) bool {
	return name == "coroutine" || name == "generator" || name == "async_generator"
}

// coroChain follows a coroutine's await chain: each coroutine's frame
// (gen + gi_iframe), and while its state is SUSPENDED_YIELD_FROM, the
// awaited object on top of its value stack, as long as that is a coroutine
// (or an async generator's asend/athrow running its generator).
func (ar *asyncReader) coroChain(coro uint64) ([]Frame, string, error) {
	p, l, r := ar.p, ar.p.Layout, &ar.p.objs
	need := ar.giIFrame + max(l.FrameSize, ar.frameSP+8)
	need = max(need, ar.giState+1)
	if cap(ar.genBuf) < int(need) {
		ar.genBuf = make([]byte, need)
	}
	b := ar.genBuf[:need]
	var out []Frame
	seen := map[uint64]bool{}
	via := "" // the asend/athrow type when coro is the async generator it runs
	for depth := 0; coro != 0; depth++ {
		if depth >= maxCoroChain || seen[coro] {
			return out, "", fmt.Errorf("await chain longer than %d or cyclic", maxCoroChain)
		}
		seen[coro] = true
		if err := r.mem.Read(coro, b); err != nil {
			return out, "", err
		}
		tn := ar.typeName(le64(b, l.ObType))
		if via != "" && (tn != "async_generator" || !agenRunning(b, l.objectHeaderGrowth())) {
			return out, via, nil // the generator does not run for it: the chain ends at the awaitable
		}
		via = ""
		if isAgenAwaitable(tn) {
			// An async generator's asend/athrow: go on into the generator
			// while it runs for an awaitable (asyncio_agen.go).
			gen := agenOf(b, l.objectHeaderGrowth())
			if gen == 0 {
				return out, tn, nil
			}
			coro, via = gen, tn
			continue
		}
		if !isCoroType(tn) {
			if depth == 0 {
				return out, tn, fmt.Errorf("task's coroutine is a %q: not readable", tn)
			}
			return out, tn, nil
		}
		state := int8(b[ar.giState])
		if state > ar.st.executing || state < ar.st.created && ar.st.created < 0 {
			return out, "", nil // completed or cleared: no frame left
		}
		fr := b[ar.giIFrame:]
		code := le64(fr, l.FrameCode)
		if l.CodeTagged {
			code &^= 3
		}
		ci, err := p.code(code)
		if err != nil {
			return out, "", err
		}
		instr := le64(fr, l.FrameInstr)
		var tlbc int32 // 3.14t: the thread-local bytecode copy the frame last ran
		if l.FrameTLBCIndex != 0 && uint64(len(fr)) >= l.FrameTLBCIndex+4 {
			tlbc = int32(le32(fr, l.FrameTLBCIndex))
		}
		f := Frame{Function: ci.name, File: ci.file, Code: code, CodeID: ci.serial, Addr: coro + ar.giIFrame,
			Line: ci.line(int((int64(instr) - int64(p.instrBase(code, tlbc))) / 2))}
		if state == ar.st.created {
			f.Line = ci.firstLine
		}
		out = append(out, f)
		if ar.legacy != nil {
			next, err := ar.legacyAwaited(coro, fr, state)
			if err != nil || next == 0 {
				return out, "", err
			}
			coro = next
			continue
		}
		if state != ar.st.yieldFrom {
			return out, "", nil
		}
		sp := le64(fr, ar.frameSP)
		if sp < coro+ar.giIFrame+l.FrameLocalsplus+8*awaitedSlot(l.Version.Minor) || sp%8 != 0 {
			return out, "", fmt.Errorf("coroutine 0x%x: stack pointer 0x%x outside its frame: %w", coro, sp, ErrTorn)
		}
		next, err := r.u64(sp - 8*awaitedSlot(l.Version.Minor))
		if err != nil {
			return out, "", err
		}
		coro = next &^ 3 // a tagged _PyStackRef
	}
	return out, "", nil
}

// awaitCycles finds cycles in the awaited-by graph (task → its awaiters),
// each reported once, as the tasks on it.
func awaitCycles(tasks []AsyncTask) [][]uint64 {
	by := make(map[uint64][]uint64, len(tasks))
	for _, t := range tasks {
		by[t.Addr] = t.AwaitedBy
	}
	const (
		white = 0
		grey  = 1
		black = 2
	)
	color := map[uint64]int{}
	var cycles [][]uint64
	var path []uint64
	var visit func(u uint64)
	visit = func(u uint64) {
		color[u] = grey
		path = append(path, u)
		for _, w := range by[u] {
			switch color[w] {
			case white:
				if len(path) < maxCoroChain*64 {
					visit(w)
				}
			case grey:
				for i := len(path) - 1; i >= 0; i-- {
					if path[i] == w {
						cycles = append(cycles, append([]uint64(nil), path[i:]...))
						break
					}
				}
			}
		}
		path = path[:len(path)-1]
		color[u] = black
	}
	for _, t := range tasks {
		if color[t.Addr] == white && len(cycles) < 100 {
			visit(t.Addr)
		}
	}
	return cycles
}
