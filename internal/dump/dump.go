package dump

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// Version is the JSON schema version of a dump (docs/json.md).
const Version = 1

// Dump is every thread's Python stack at one moment.
type Dump struct {
	Schema  int          `json:"schema"`
	Pid     int          `json:"pid"`
	Python  PythonInfo   `json:"python"`
	Threads []ThreadDump `json:"threads"`
	Read    ReadInfo     `json:"read"`
	Native  *NativeInfo  `json:"native,omitempty"` // dump --native (dumpnative.go)
}

// PythonInfo says which interpreter was read and how its layout was known.
type PythonInfo struct {
	Version string `json:"version"`
	Binary  string `json:"binary"`
	Layout  string `json:"layout"`
}

// ReadInfo is the dump's own perturbation report.
type ReadInfo struct {
	Method      string  `json:"method"` // "unsynchronised" or "ptrace-stopped"
	DurationUS  float64 `json:"duration_us"`
	StoppedUS   float64 `json:"target_stopped_us"`
	TornRetries uint64  `json:"torn_retries"`
	Restops     int     `json:"restops,omitempty"` // stopped again: a thread was mid-transition
	Torn        int     `json:"threads_inconsistent"`
	// AlreadyStopped: with ptrace-stopped, the target was in a job-control
	// stop (SIGSTOP, SIGTSTP…) before the read, and was left stopped.
	AlreadyStopped bool `json:"already_stopped,omitempty"`
	// GIL: how the GIL's holder read (see gilVerdict): "held" (one
	// thread held it from before the stacks and states were read to after;
	// it is marked), "free" (free at both readings; nobody marked),
	// "changed" (taken, dropped or passed on during the read; nobody
	// marked); "" when there is no GIL (free-threaded) or it was not read.
	GIL string `json:"gil,omitempty"`
}

// ThreadDump is one thread.
type ThreadDump struct {
	Tid        int    `json:"tid"`
	ThreadID   uint64 `json:"thread_id"`
	Name       string `json:"name"`
	HoldsGIL   bool   `json:"holds_gil"`
	State      string `json:"state"`
	Interp     int64  `json:"interpreter"`
	Consistent bool   `json:"consistent"`
	// Truncated: the stack is deeper than pyobs walks (pyframes.MaxDepth):
	// Frames holds its innermost frames only. Consistent still says
	// whether it changed while read.
	Truncated bool `json:"truncated,omitempty"`
	// NoThread: no thread of the process is this thread state's (its
	// recorded id is none of theirs, nor is its pthread's): a state left
	// in the interpreter by a fork that bypassed Python's own handling, or
	// one whose thread exited as it was read. Tid is 0.
	NoThread bool          `json:"no_thread,omitempty"`
	Error    string        `json:"error,omitempty"`
	Frames   []FrameDump   `json:"frames"`
	Native   *ThreadNative `json:"native,omitempty"`
}

// FrameDump is one frame, innermost first.
type FrameDump struct {
	Function string           `json:"function"`
	File     string           `json:"file"`
	Line     int              `json:"line"`
	Entry    bool             `json:"entry,omitempty"`
	Locals   []pyframes.Local `json:"locals,omitempty"`
	Kind     string           `json:"kind,omitempty"`   // with --native: python, native or marker
	Offset   uint64           `json:"offset,omitempty"` // native: address in File's own terms
	// Interp: the interpreter the frame runs in, on every Python frame of
	// a thread whose stack spans several (it runs a sub-interpreter's
	// code: those frames on top of the calling interpreter's); absent
	// otherwise (the thread's "interpreter" is every frame's).
	Interp *int64 `json:"interpreter,omitempty"`
}

// Options select what a dump reads.
type Options struct {
	Locals bool
	Lock   bool // stop the threads for a frozen snapshot
	// Native unwinds each stopped thread's stack too (implies Lock),
	// copying StackSize bytes of it (0: DefaultStackSize).
	Native    bool
	StackSize int
	// Tasks: the command reads the asyncio task tree (RunTasks); only
	// Validate looks at it.
	Tasks bool
	// States: the threads' states, their read begun before the session
	// was opened (EarlyStates; not with Lock or Native, which read them
	// right before the stop).
	States *States
}

// Validate checks the options as the command line gave them.
func (o Options) Validate() error {
	switch {
	case o.StackSize < 4096 || o.StackSize > 16<<20:
		return fmt.Errorf("dump: --stack-size %d is not in 4096..16777216", o.StackSize)
	case o.Native && o.Tasks:
		return errors.New("dump: --native does not combine with --tasks")
	}
	return nil
}

// maxStops bounds the stops of one dump with Lock or Native.
const maxStops = 4

// anyTorn: a thread's Python stack could not be read consistently.
func anyTorn(threads []pyframes.Thread) bool {
	for _, t := range threads {
		if t.Err != nil && errors.Is(t.Err, pyframes.ErrTorn) {
			return true
		}
	}
	return false
}

// Run reads every thread's stack once. A dump takes milliseconds: it
// finishes whatever ctx says (Ctrl-C during a dump still writes it).
func Run(_ context.Context, s *session.Session, opt Options) (*Dump, error) {
	d := &Dump{Schema: Version, Pid: s.Pid, Python: PythonInfo{
		Version: s.Py.Version().String(), Binary: s.Py.Info.Binary, Layout: s.Py.Layout.Source,
	}, Read: ReadInfo{Method: "unsynchronised"}}
	before := s.Py.Stats
	start := time.Now()
	var threads []pyframes.Thread
	var err error
	var states map[int]string
	var nat *nativeDump
	var read time.Duration
	// The GIL is read before and after the stacks and the threads' states
	// (a holder is marked only if nothing changed between): read once,
	// it was another moment than the states, and a thread that had just
	// dropped it for its peer was marked holding it, asleep in futex.
	gilBefore := s.Py.GIL()
	var gilAfter map[int64]pyframes.GILState
	if opt.Lock || opt.Native {
		d.Read.Method = "ptrace-stopped"
		states = taskStates(s) // after Thaw, every thread looks "running" while it wakes up
		if opt.Native {
			nat = prepareNative(s, opt.StackSize)
		}
		// A thread stopped mid-transition (3.11 points tstate->cframe at a
		// new eval loop's cframe a few instructions before filling it) has
		// no readable Python stack at that instant, however long it stays
		// stopped: let it run on and stop again, a few times at most.
		for attempt := 0; ; attempt++ {
			if nat != nil {
				nat.reset()
			}
			f, ferr := s.Freeze()
			if ferr != nil {
				return nil, ferr
			}
			d.Read.AlreadyStopped = f.JobStopped
			if nat != nil {
				nat.capture(f)
			}
			threads, err = s.Py.Threads(pyframes.Options{Names: true, Locals: opt.Locals, Retries: 1, Links: opt.Native})
			// Read while stopped: the states were read before the stop, and
			// once thawed a waiter whose interval ran out takes the GIL.
			gilAfter = s.Py.GIL()
			f.Thaw()
			d.Read.StoppedUS += float64(f.Held.Nanoseconds()) / 1e3
			if err != nil || !anyTorn(threads) || attempt == maxStops-1 {
				break
			}
			d.Read.Restops++
			// Thawed threads must run before the next stop, or it stops
			// them at the same instruction.
			time.Sleep(time.Duration(attempt+1) * time.Millisecond)
		}
	} else {
		// The threads' states are read beside the stacks, on another CPU
		// when there is one: each is three /proc files (~10 µs apiece
		// here), together as long as the stacks of a 50-thread process.
		// Begun before the session opened when the caller could
		// (opt.States): its opening is then beside them too.
		early := opt.States
		if early == nil || early.pid != s.Pid {
			early = startStates(s.FS, s.Pid)
		}
		// Read live, the thread list can change under the read (a thread
		// state freed and its memory reused): read again, a few times.
		for attempt := 0; attempt < 3; attempt++ {
			threads, err = s.Py.Threads(pyframes.Options{Names: true, Locals: opt.Locals})
			if !errors.Is(err, pyframes.ErrTorn) {
				break
			}
		}
		read = time.Since(start)
		states = early.wait()
	}
	if read == 0 {
		read = time.Since(start)
	}
	d.Read.DurationUS = float64(read.Nanoseconds()) / 1e3
	if err != nil {
		return nil, s.Explain("read the Python threads", err)
	}
	d.Read.TornRetries = s.Py.Stats.TornRetries - before.TornRetries
	tids, _ := s.FS.Tasks(s.Pid)
	ns := s.HostTids()
	// The states not read before (--lock reads them first), side by side.
	var need []int
	for _, t := range threads {
		if tid := s.HostTid(t.NativeID, t.ThreadID, tids, ns); tid > 0 {
			_, ok := states[tid]
			// Unstopped, the states were begun before the GIL's first
			// reading: the holder's is read again, between the two.
			again := !opt.Lock && !opt.Native && t.HoldsGIL && gilBefore[t.Interp].Holder == t.Addr
			if !ok || again {
				delete(states, tid)
				need = append(need, tid)
			}
		}
	}
	more := statesOf(s.FS, s.Pid, need)
	if gilAfter == nil {
		gilAfter = s.Py.GIL()
	}
	var holders map[uint64]bool
	holders, d.Read.GIL = gilVerdict(gilBefore, gilAfter)
	d.Threads = make([]ThreadDump, 0, len(threads))
	for _, t := range threads {
		td := ThreadDump{ThreadID: t.ThreadID, Name: t.Name, Interp: t.Interp,
			Consistent: t.Consistent, Truncated: t.Truncated, Tid: s.HostTid(t.NativeID, t.ThreadID, tids, ns), Frames: make([]FrameDump, 0, len(t.Frames))}
		td.NoThread = td.Tid == 0 && tids != nil
		// With the threads stopped, a state read after the thaw (a thread
		// born since the states were read) lies outside the readings.
		_, stateBetween := states[td.Tid]
		stateBetween = stateBetween || (!opt.Lock && !opt.Native)
		td.HoldsGIL = t.HoldsGIL && holders[t.Addr] && stateBetween
		if t.Err != nil {
			td.Error = t.Err.Error()
			d.Read.Torn++
		}
		if st, ok := states[td.Tid]; ok {
			td.State = st
		} else if st, ok := more[td.Tid]; ok {
			td.State = st
		}
		several := false
		for _, f := range t.Frames {
			several = several || f.Interp != t.Frames[0].Interp
		}
		for _, f := range t.Frames {
			fd := FrameDump{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry, Locals: f.Locals}
			if several {
				fd.Interp = &f.Interp
			}
			td.Frames = append(td.Frames, fd)
		}
		if nat != nil && !td.NoThread { // no thread: nothing to unwind
			nat.glue(&td, t.Frames)
		}
		d.Threads = append(d.Threads, td)
	}
	if nat != nil {
		d.Native = &nat.info
	}
	// Oldest thread (the main one) first, like /proc/PID/task.
	sort.SliceStable(d.Threads, func(i, j int) bool {
		a, b := d.Threads[i].Tid, d.Threads[j].Tid
		if a == 0 || b == 0 {
			return b == 0 && a != 0
		}
		return a < b
	})
	return d, nil
}

// gilVerdict compares the GIL readings before and after a dump's reads,
// interpreter by interpreter: the thread states that held their GIL
// throughout, and the verdict for ReadInfo.GIL ("changed" if any GIL
// changed, else "held" if any was held, else "free"; "" with no GIL read).
func gilVerdict(before, after map[int64]pyframes.GILState) (map[uint64]bool, string) {
	holders := map[uint64]bool{}
	verdict := ""
	for id, b := range before {
		a, ok := after[id]
		if !b.Read || !ok || !a.Read {
			continue
		}
		switch h := b.HeldThrough(a); {
		case h != 0:
			holders[h] = true
			if verdict != "changed" {
				verdict = "held"
			}
		case b == a: // free at both, with no take between
			if verdict == "" {
				verdict = "free"
			}
		default:
			verdict = "changed"
		}
	}
	return holders, verdict
}

// TasksDump is the asyncio task tree of a process (dump --tasks); see
// docs/json.md. Supported is false when the version has no way to read it
// (before 3.14) or asyncio is not imported; Note then says so, and Stacks
// still holds every thread's Python stack.
type TasksDump struct {
	Schema    int        `json:"schema"`
	Kind      string     `json:"kind"` // "asyncio-tasks"
	Pid       int        `json:"pid"`
	Python    PythonInfo `json:"python"`
	Supported bool       `json:"supported"`
	Note      string     `json:"note,omitempty"`
	Section   string     `json:"section,omitempty"` // file whose .AsyncioDebug section was read, or the module state read (3.12/3.13)
	// Limits: per field, what this version's read cannot reconstruct
	// (3.12/3.13); absent when the tree is complete as read (3.14+).
	Limits []string `json:"limits,omitempty"`
	// ReadErrors: task sets that broke off while read (3.12/3.13).
	ReadErrors []string         `json:"read_errors,omitempty"`
	Threads    []TaskThreadDump `json:"threads"`
	Tasks      []TaskDump       `json:"tasks"`
	Cycles     [][]uint64       `json:"cycles"`
	Read       TasksReadInfo    `json:"read"`
	Stacks     *Dump            `json:"stacks"`
}

// TaskThreadDump is one thread's asyncio state.
type TaskThreadDump struct {
	Tid         int    `json:"tid"`
	ThreadID    uint64 `json:"thread_id"`
	RunningLoop bool   `json:"running_loop"`
	RunningTask uint64 `json:"running_task"` // task id, 0: none
	Tasks       int    `json:"tasks"`        // -1: not recorded per thread (before 3.14)
	Error       string `json:"error,omitempty"`
}

// TaskDump is one task. ID is the task object's address (what id(task)
// returns in the target); AwaitedBy holds the ids of the tasks awaiting it.
type TaskDump struct {
	ID         uint64      `json:"id"`
	Name       string      `json:"name"`
	IsTask     bool        `json:"is_task"`
	ThreadID   uint64      `json:"thread_id"`
	Running    bool        `json:"running"`
	AwaitedBy  []uint64    `json:"awaited_by"`
	Coroutines []FrameDump `json:"coroutines"` // outermost (the task's own coroutine) first
	Awaiting   string      `json:"awaiting,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// TasksReadInfo is the task read's perturbation report.
type TasksReadInfo struct {
	Method      string  `json:"method"`
	DurationUS  float64 `json:"duration_us"`
	StoppedUS   float64 `json:"target_stopped_us"`
	Torn        int     `json:"torn"`
	Retries     int     `json:"list_retries"`
	ExitedTasks int     `json:"tasks_of_exited_threads"`
}

// RunTasks reads the asyncio task tree, then every thread's stack.
func RunTasks(ctx context.Context, s *session.Session, opt Options) (*TasksDump, error) {
	d := &TasksDump{Schema: Version, Kind: "asyncio-tasks", Pid: s.Pid, Python: PythonInfo{
		Version: s.Py.Version().String(), Binary: s.Py.Info.Binary, Layout: s.Py.Layout.Source,
	}, Threads: []TaskThreadDump{}, Tasks: []TaskDump{}, Cycles: [][]uint64{}, Read: TasksReadInfo{Method: "unsynchronised"}}
	start := time.Now()
	var snap *pyframes.AsyncSnapshot
	var err error
	if opt.Lock {
		d.Read.Method = "ptrace-stopped"
		f, ferr := s.Freeze()
		if ferr != nil {
			return nil, ferr
		}
		snap, err = s.Py.AsyncioTasks()
		f.Thaw()
		d.Read.StoppedUS = float64(f.Held.Nanoseconds()) / 1e3
	} else {
		snap, err = s.Py.AsyncioTasks()
	}
	d.Read.DurationUS = float64(time.Since(start).Nanoseconds()) / 1e3
	var unsup *pyframes.AsyncioUnsupportedError
	switch {
	case errors.As(err, &unsup):
		d.Note = unsup.Error() + ": no task tree; thread stacks below"
	case errors.Is(err, pyframes.ErrAsyncioNotImported):
		d.Note = "asyncio not imported: no tasks"
	case err != nil:
		return nil, s.Explain("read the asyncio tasks", err)
	default:
		d.Supported = true
		d.Section = snap.Section
		d.Limits, d.ReadErrors = snap.Limits, snap.Errors
		d.Read.Torn = snap.Torn
		d.Read.Retries = snap.Retries
		d.Read.ExitedTasks = snap.ExitedTasks
		tids, _ := s.FS.Tasks(s.Pid)
		for _, th := range snap.Threads {
			td := TaskThreadDump{Tid: th.NativeID, ThreadID: th.ThreadID, RunningLoop: th.RunningLoop != 0,
				RunningTask: th.RunningTask, Tasks: th.Tasks, Error: th.Err}
			if td.Tid == 0 {
				td.Tid = s.TidFromPthread(th.ThreadID, tids)
			}
			d.Threads = append(d.Threads, td)
		}
		for _, t := range snap.Tasks {
			td := TaskDump{ID: t.Addr, Name: t.Name, IsTask: t.IsTask, ThreadID: t.ThreadID, Running: t.Running,
				AwaitedBy: append([]uint64{}, t.AwaitedBy...), Coroutines: []FrameDump{}, Awaiting: t.Awaiting, Error: t.Err}
			for _, f := range t.Coroutines {
				td.Coroutines = append(td.Coroutines, FrameDump{Function: f.Function, File: f.File, Line: f.Line})
			}
			d.Tasks = append(d.Tasks, td)
		}
		d.Cycles = append(d.Cycles, snap.Cycles...)
	}
	if d.Stacks, err = Run(ctx, s, opt); err != nil {
		return nil, err
	}
	return d, nil
}
