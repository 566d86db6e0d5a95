package record

import (
	"errors"
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// record --async: a sample of a thread that is running an asyncio task is
// rooted at that task and the tasks awaiting it ("[task] NAME" frames,
// outermost awaiter first) instead of at the event loop: the frames below
// the task's own coroutine frame (asyncio.run, run_forever, _run_once,
// Handle._run) are dropped. Needs CPython 3.14+, where each thread state
// holds its running task (AsyncioDebug).

// AsyncStats is record --async's account of itself (weights in samples).
type AsyncStats struct {
	Section string `json:"section,omitempty"` // file whose .AsyncioDebug section was read
	// InTask: samples rooted at a task. NoTask: samples of a thread that was
	// running no task (the loop itself, or no loop): kept as they are.
	InTask uint64 `json:"in_task"`
	NoTask uint64 `json:"no_task"`
	// Changed: the thread's running task changed while its stack was read;
	// the stack is kept without a task root.
	Changed uint64 `json:"task_changed"`
	// Unreadable: the running task could not be read (freed, torn): under
	// [task unreadable] with the whole stack.
	Unreadable uint64 `json:"task_unreadable"`
	// ChainCut: samples whose awaiter chain ended early at an awaiter that
	// could not be read (or a cycle): rooted at the part that was read.
	ChainCut uint64 `json:"chain_cut"`
	// CoroNotOnStack: the task was running but its coroutine's frame was not
	// on the stack (its step was in C, or the stack moved on): the whole
	// stack is kept under the task.
	CoroNotOnStack uint64 `json:"coro_not_on_stack"`
	// TaskReads: task structs read (each distinct running task once per
	// drain of the rings, plus its awaiters).
	TaskReads uint64 `json:"task_reads"`
	// Note: e.g. that asyncio was never imported during the recording.
	Note string `json:"note,omitempty"`
}

// AsyncUnsupportedError: record --async on a version without a per-thread
// running task. It unwraps to *pyframes.UnsupportedVersionError (exit 5).
type AsyncUnsupportedError struct{ Version pyframes.Version }

func (e *AsyncUnsupportedError) Error() string {
	return fmt.Sprintf("record --async needs CPython 3.14+ (the thread state's running task, published by AsyncioDebug); this is %s", e.Version)
}

func (e *AsyncUnsupportedError) Unwrap() error {
	return &pyframes.UnsupportedVersionError{Version: e.Version, Why: "record --async needs 3.14+"}
}

type asyncEntry struct {
	ids      []int  // the task frames, outermost awaiter first; nil: unreadable
	coroCode uint64 // the running task's coroutine's code object
	cut      bool
}

type asyncAttr struct {
	p       *pyframes.Process
	rt      *pyframes.RunningTasks // nil until asyncio is imported
	nextTry time.Time
	cache   map[uint64]asyncEntry // per drain: a task's name may change between drains
	chain   []pyframes.TaskHead
	frames  map[string]int // "[task] NAME" → profile frame id
	stats   AsyncStats
}

func newAsync(p *pyframes.Process) (*asyncAttr, error) {
	a := &asyncAttr{p: p, cache: map[uint64]asyncEntry{}, frames: map[string]int{}}
	if err := a.setup(); err != nil {
		var unsup *pyframes.AsyncioUnsupportedError
		if errors.As(err, &unsup) {
			return nil, &AsyncUnsupportedError{Version: unsup.Version}
		}
		if !errors.Is(err, pyframes.ErrAsyncioNotImported) {
			return nil, fmt.Errorf("record --async: pid %d: %w", p.Pid, err)
		}
	}
	return a, nil
}

// setup finds the asyncio offsets; until asyncio is imported it is retried
// at most every 200 ms.
func (a *asyncAttr) setup() error {
	a.nextTry = time.Now().Add(200 * time.Millisecond)
	rt, err := a.p.RunningTasks()
	if err != nil {
		return err
	}
	a.rt, a.stats.Section = rt, rt.Section
	return nil
}

// newDrain starts a drain of the rings (or a timer tick): the per-drain
// cache is emptied.
func (a *asyncAttr) newDrain() {
	clear(a.cache)
	if a.rt == nil && time.Now().After(a.nextTry) {
		_ = a.setup()
	}
}

// running reads ts's running task (0: none or not known).
func (a *asyncAttr) running(ts uint64) uint64 {
	if a.rt == nil {
		return 0
	}
	t, err := a.rt.Running(ts)
	if err != nil {
		return 0
	}
	return t
}

// root appends the task frames of the task ts is running to ids and
// returns the index of the outermost frame to keep (frames are innermost
// first): the task's coroutine frame. before is the running task read
// before the stack.
func (a *asyncAttr) root(prof *flame.Profile, ids []int, ts, before uint64, frames []pyframes.Frame, weight int64) ([]int, int) {
	keep := len(frames) - 1
	w := uint64(weight)
	if a.rt == nil {
		a.stats.NoTask += w
		return ids, keep
	}
	after := a.running(ts)
	switch {
	case after != before:
		a.stats.Changed += w
		return ids, keep
	case after == 0:
		a.stats.NoTask += w
		return ids, keep
	}
	e, ok := a.cache[after]
	if !ok {
		e = a.entry(prof, after)
		a.cache[after] = e
	}
	if e.ids == nil {
		a.stats.Unreadable += w
		return append(ids, a.frame(prof, "[task unreadable]")), keep
	}
	a.stats.InTask += w
	if e.cut {
		a.stats.ChainCut += w
	}
	ids = append(ids, e.ids...)
	if e.coroCode != 0 {
		for i := len(frames) - 1; i >= 0; i-- {
			if frames[i].Code == e.coroCode {
				return ids, i
			}
		}
	}
	a.stats.CoroNotOnStack += w
	return ids, keep
}

// entry reads a task's awaiter chain into profile frames.
func (a *asyncAttr) entry(prof *flame.Profile, task uint64) asyncEntry {
	chain, err := a.rt.Chain(task, a.chain)
	a.chain = chain
	a.stats.TaskReads += uint64(len(chain))
	if len(chain) == 0 || chain[len(chain)-1].Addr != task {
		return asyncEntry{} // the running task itself is unreadable
	}
	e := asyncEntry{coroCode: chain[len(chain)-1].CoroCode, cut: err != nil}
	if e.cut {
		e.ids = append(e.ids, a.frame(prof, "[awaiter unreadable]"))
	}
	for _, h := range chain {
		e.ids = append(e.ids, a.frame(prof, "[task] "+h.Name))
	}
	return e
}

func (a *asyncAttr) frame(prof *flame.Profile, label string) int {
	if id, ok := a.frames[label]; ok {
		return id
	}
	id := prof.Intern(flame.Frame{Kind: flame.State, Function: label})
	if len(a.frames) < 1<<14 {
		a.frames[label] = id
	}
	return id
}

func (a *asyncAttr) finish() AsyncStats {
	if a.rt == nil {
		a.stats.Note = "asyncio was not imported while recording: no task roots"
	}
	return a.stats
}
