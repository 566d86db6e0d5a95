package remoteexec

import (
	"errors"
	"fmt"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// EvalPleaseStopBit is _PY_EVAL_PLEASE_STOP_BIT of PyThreadState.eval_breaker
// (Include/internal/pycore_ceval.h, 3.14 and 3.15): the bit PEP 768 says a
// debugger sets so the thread looks at its pending call.
const EvalPleaseStopBit = 1 << 5

// ErrDisabled: the target's interpreter runs with remote debugging off.
// It is also ErrUnsupported (errors.Is): the target cannot take a
// request, as one before 3.14 cannot (exit status 5 either way).
var ErrDisabled error = disabledError{}

type disabledError struct{}

func (disabledError) Error() string {
	return "remote debugging is disabled in the target (-X disable-remote-debug or PYTHON_DISABLE_REMOTE_DEBUG set when it started)"
}

func (disabledError) Is(target error) bool { return target == ErrUnsupported }

// ErrUnsupported: the interpreter has no remote-debugging protocol.
var ErrUnsupported = errors.New("remote execution needs CPython 3.14+ (PEP 768)")

// ErrNoMain: the interpreter has not started running __main__ yet (or is
// finalizing): there is no main thread to run a script in.
var ErrNoMain = errors.New("the interpreter is not running __main__ (starting up or finalizing)")

// Target is where a request is written: one thread state's fields, as
// absolute addresses in the target.
type Target struct {
	Version     pyframes.Version
	Interp      uint64 // PyInterpreterState*
	Tstate      uint64 // PyThreadState*
	Tid         int    // native thread id of Tstate
	EvalBreaker uint64 // &tstate->eval_breaker
	Pending     uint64 // &tstate->remote_debugger_support.debugger_pending_call
	Path        uint64 // &tstate->remote_debugger_support.debugger_script_path
	PathSize    int    // sizeof that buffer (Py_MAX_SCRIPT_PATH_SIZE)
	Threads     []int  // native ids of every thread state of the interpreter
}

// maxThreads bounds a walk of the thread list (a cycle in torn memory).
const maxThreads = 1 << 16

// Locate reads the debug offsets at runtime (&_PyRuntime), checks that the
// main interpreter allows remote debugging, and finds the thread state of
// tid (0: the interpreter's main thread, as sys.remote_exec does).
func Locate(mem pyframes.Memory, pid int, runtime uint64, tid int) (*Target, error) {
	head := make([]byte, 24)
	if err := mem.Read(runtime, head); err != nil {
		return nil, fmt.Errorf("can't read _PyRuntime of pid %d at 0x%x: %w", pid, runtime, err)
	}
	if string(head[:8]) != string(pyframes.DebugCookie) {
		return nil, fmt.Errorf("pid %d: no debug-offsets table at _PyRuntime (0x%x): %w", pid, runtime, ErrUnsupported)
	}
	v := pyframes.VersionHex(le64(head[8:]))
	if v.Major != 3 || v.Minor < 14 {
		return nil, fmt.Errorf("pid %d runs Python %s: %w", pid, v, ErrUnsupported)
	}
	n := pyframes.DebugTableSize(v.Minor)
	if n == 0 {
		return nil, fmt.Errorf("pid %d runs Python %s: no known debug-offsets layout for it", pid, v)
	}
	tbl := make([]byte, n)
	if err := mem.Read(runtime, tbl); err != nil {
		return nil, fmt.Errorf("can't read the debug offsets of pid %d at 0x%x: %w", pid, runtime, err)
	}
	d, err := pyframes.ParseDebugOffsets(tbl)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't parse the debug offsets at 0x%x: %w", pid, runtime, err)
	}
	f := d.Fields
	rd := func(addr uint64, what string) (uint64, error) {
		b := make([]byte, 8)
		if err := mem.Read(addr, b); err != nil {
			return 0, fmt.Errorf("can't read %s of pid %d at 0x%x: %w", what, pid, addr, err)
		}
		return le64(b), nil
	}
	// The main interpreter: the last of the list (the head is the newest).
	interp, err := rd(runtime+f["runtime_state.interpreters_head"], "the interpreter list head")
	if err != nil {
		return nil, err
	}
	if interp == 0 {
		return nil, fmt.Errorf("pid %d has no interpreter (finalizing or not started)", pid)
	}
	for i := 0; ; i++ {
		next, err := rd(interp+f["interpreter_state.next"], "PyInterpreterState.next")
		if err != nil {
			return nil, err
		}
		if next == 0 {
			break
		}
		if i > 4096 {
			return nil, fmt.Errorf("pid %d: the interpreter list does not end (torn read?)", pid)
		}
		interp = next
	}
	en, err := rd(interp+f["debugger_support.remote_debugging_enabled"], "config.remote_debug")
	if err != nil {
		return nil, err
	}
	if int32(en) != 1 {
		return nil, fmt.Errorf("pid %d (interpreter 0x%x): %w", pid, interp, ErrDisabled)
	}
	t := &Target{Version: v, Interp: interp}
	var ts uint64
	if tid == 0 {
		// threads.main is set once __main__ runs; before (site, a spawned
		// program's first frames) a script would run without builtins.
		if ts, err = rd(interp+f["interpreter_state.threads_main"], "PyInterpreterState.threads.main"); err != nil {
			return nil, err
		}
		if ts == 0 {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoMain)
		}
	}
	if ts != 0 {
		t.Tstate = ts
		id, err := rd(ts+f["thread_state.native_thread_id"], "PyThreadState.native_thread_id")
		if err != nil {
			return nil, err
		}
		t.Tid = int(id)
	} else {
		ts, err := rd(interp+f["interpreter_state.threads_head"], "PyInterpreterState.threads.head")
		if err != nil {
			return nil, err
		}
		for i := 0; ts != 0 && i < maxThreads; i++ {
			id, err := rd(ts+f["thread_state.native_thread_id"], "PyThreadState.native_thread_id")
			if err != nil {
				return nil, err
			}
			if int(id) == tid {
				t.Tstate, t.Tid = ts, tid
				break
			}
			if ts, err = rd(ts+f["thread_state.next"], "PyThreadState.next"); err != nil {
				return nil, err
			}
		}
		if t.Tstate == 0 {
			return nil, fmt.Errorf("pid %d: thread %d has no Python thread state in the main interpreter", pid, tid)
		}
	}
	// Every thread, for the advice when the chosen one never comes back.
	ts, err = rd(interp+f["interpreter_state.threads_head"], "PyInterpreterState.threads.head")
	for i := 0; err == nil && ts != 0 && i < maxThreads; i++ {
		var id uint64
		if id, err = rd(ts+f["thread_state.native_thread_id"], "PyThreadState.native_thread_id"); err == nil {
			t.Threads = append(t.Threads, int(id))
			ts, err = rd(ts+f["thread_state.next"], "PyThreadState.next")
		}
	}
	rds := f["debugger_support.remote_debugger_support"]
	t.EvalBreaker = t.Tstate + f["debugger_support.eval_breaker"]
	t.Pending = t.Tstate + rds + f["debugger_support.debugger_pending_call"]
	t.Path = t.Tstate + rds + f["debugger_support.debugger_script_path"]
	t.PathSize = int(f["debugger_support.debugger_script_path_size"])
	if t.PathSize < 16 || t.PathSize > 1<<16 {
		return nil, fmt.Errorf("pid %d: debugger_script_path_size %d is implausible", pid, t.PathSize)
	}
	return t, nil
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
