package pyframes

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pyobs/pyobs/internal/output"
)

// Per-sample task attribution (record --async, 3.14+): which task a thread
// is running right now and the chain of tasks awaiting it. Unlike
// AsyncioTasks this walks no task list: it starts at the thread state's
// asyncio_running_task and follows task_awaited_by, a few small reads.

// RunningTasks reads running tasks and their awaiter chains. Not for
// concurrent use (it shares the Process's caches).
type RunningTasks struct {
	ar      *asyncReader
	Section string // the file whose .AsyncioDebug section was read
	state   []byte
	nameBuf []byte
}

// TaskHead is what a sample needs of one task.
type TaskHead struct {
	Addr     uint64
	Name     string
	CoroCode uint64 // code object of the task's own coroutine (0: unknown)
	// Awaiter: the task awaiting this one (the lowest address when several
	// do, so that a chain is the same from sample to sample); 0 when none.
	Awaiter  uint64
	Awaiters int // how many await it
}

// errNotATask: the object is a Future (an awaiter that is not a Task).
var errNotATask = errors.New("a Future, not a Task")

// MaxAwaiterChain bounds an awaiter chain (cycles end it too).
const MaxAwaiterChain = 64

// RunningTasks prepares per-sample reads. The errors are AsyncioTasks's:
// *AsyncioUnsupportedError before 3.14, ErrAsyncioNotImported while the
// target has not imported asyncio (it may later: call again).
func (p *Process) RunningTasks() (*RunningTasks, error) {
	ar, path, err := p.asyncSetup()
	if err != nil {
		return nil, err
	}
	return &RunningTasks{ar: ar, Section: path}, nil
}

// Running returns the task the thread state ts is running (0: none, or its
// thread runs no event loop).
func (rt *RunningTasks) Running(ts uint64) (uint64, error) {
	o := rt.ar.o
	lo, hi := min(o.TstateRunningLoop, o.TstateRunningTask), max(o.TstateRunningLoop, o.TstateRunningTask)+8
	if hi-lo > 256 {
		// Not adjacent: two reads.
		loop, err := rt.ar.p.objs.u64(ts + o.TstateRunningLoop)
		if err != nil || loop == 0 {
			return 0, err
		}
		return rt.ar.p.objs.u64(ts + o.TstateRunningTask)
	}
	if cap(rt.state) < int(hi-lo) {
		rt.state = make([]byte, hi-lo)
	}
	b := rt.state[:hi-lo]
	if err := rt.ar.p.objs.mem.Read(ts+lo, b); err != nil {
		return 0, fmt.Errorf("thread state 0x%x: %w", ts, err)
	}
	if le64(b, o.TstateRunningLoop-lo) == 0 {
		return 0, nil
	}
	return le64(b, o.TstateRunningTask-lo), nil
}

// Task reads one task's name, its coroutine's code object (with coro) and
// its awaiter.
func (rt *RunningTasks) Task(addr uint64, coro bool) (TaskHead, error) {
	ar := rt.ar
	o, r, l := ar.o, &ar.p.objs, ar.p.Layout
	if cap(ar.taskBuf) < int(o.TaskSize) {
		ar.taskBuf = make([]byte, o.TaskSize)
	}
	b := ar.taskBuf[:o.TaskSize]
	if err := r.mem.Read(addr, b); err != nil {
		return TaskHead{}, fmt.Errorf("task 0x%x: %w", addr, err)
	}
	tn := ar.typeName(le64(b, l.ObType))
	if strings.Contains(tn, "Future") && b[o.TaskIsTask] == 0 {
		return TaskHead{}, errNotATask
	}
	if !strings.Contains(tn, "Task") || b[o.TaskIsTask] == 0 {
		return TaskHead{}, fmt.Errorf("task 0x%x is a %q: %w", addr, tn, ErrTorn)
	}
	h := TaskHead{Addr: addr}
	name, err := rt.name(le64(b, o.TaskName))
	if err != nil {
		return TaskHead{}, fmt.Errorf("task 0x%x name: %w", addr, err)
	}
	h.Name = name
	by, isSet := le64(b, o.TaskAwaitedBy), b[o.TaskAwaitedByIsSet] != 0
	if c := le64(b, o.TaskCoro); c != 0 && coro {
		if code, err := r.u64(c + ar.giIFrame + l.FrameCode); err == nil {
			if l.CodeTagged {
				code &^= 3
			}
			h.CoroCode = code
		}
	}
	if by == 0 {
		return h, nil
	}
	if isSet {
		keys, err := ar.setKeys(by)
		if err != nil {
			return h, fmt.Errorf("task 0x%x awaited_by: %w", addr, err)
		}
		h.Awaiters = len(keys)
		for _, k := range keys {
			if h.Awaiter == 0 || k < h.Awaiter {
				h.Awaiter = k
			}
		}
	} else {
		h.Awaiter, h.Awaiters = by, 1
	}
	return h, nil
}

// Chain reads task and its awaiters, outermost awaiter first (the task
// itself last). A chain that stops early says why in err; what was read
// is returned with it.
func (rt *RunningTasks) Chain(task uint64, out []TaskHead) ([]TaskHead, error) {
	out = out[:0]
	var err error
	for a := task; a != 0; {
		if len(out) >= MaxAwaiterChain {
			err = fmt.Errorf("awaiter chain longer than %d", MaxAwaiterChain)
			break
		}
		cyclic := false
		for _, h := range out {
			cyclic = cyclic || h.Addr == a
		}
		if cyclic {
			err = errors.New("await cycle")
			break
		}
		var h TaskHead
		if h, err = rt.Task(a, a == task); err != nil {
			if errors.Is(err, errNotATask) && a != task {
				err = nil // awaited by a plain Future: the chain of tasks ends
			} else if h.Name != "" {
				out = append(out, h) // read, but its awaiters could not be
			}
			break
		}
		out = append(out, h)
		a = h.Awaiter
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

// nameInline: bytes read at a task's name object in one go; a compact ASCII
// str or a small int fits, anything else is read the long way.
const nameInline = 128

// name reads a task's name in one read when it can (the common cases: a
// short ASCII str, or the int counter of a task never asked for its name);
// per sample this saves the header-then-data reads of the general path.
func (rt *RunningTasks) name(obj uint64) (string, error) {
	ar := rt.ar
	r, l := &ar.p.objs, ar.p.Layout
	if obj == 0 {
		return "", errors.New("NULL name")
	}
	if rt.nameBuf == nil {
		rt.nameBuf = make([]byte, nameInline)
	}
	b := rt.nameBuf
	if err := r.mem.Read(obj, b); err != nil {
		return ar.taskName(obj) // e.g. near the end of a mapping
	}
	switch tp := le64(b, l.ObType); {
	case tp == r.types.unicode && tp != 0:
		n := le64(b, l.UnicodeLength)
		kind, compact, ascii := l.unicodeState(b)
		if kind == 1 && compact && ascii && l.ASCIISize+n <= nameInline {
			return output.Printable(string(b[l.ASCIISize : l.ASCIISize+n])), nil // ASCII has ESC and BEL too
		}
	case tp == r.types.long && tp != 0 && l.Version.atLeast(12):
		// 3.12+: lv_tag = ndigits<<3 | sign (0 positive); 30-bit digits.
		tag := le64(b, l.LongTag)
		if nd := tag >> 3; tag&3 == 0 && nd <= 2 && l.LongDigits+4*nd <= nameInline {
			var v uint64
			for i := uint64(0); i < nd; i++ {
				v |= uint64(le32(b, l.LongDigits+4*i)) << (30 * i)
			}
			return fmt.Sprintf("Task-%d", v), nil
		}
	}
	return ar.taskName(obj)
}
