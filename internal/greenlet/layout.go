package greenlet

import (
	"fmt"
	"sort"
	"strings"
)

// Layout is where greenlet 3.x keeps what a reader needs. A greenlet object
// (PyGreenlet: the object header, weakreflist, dict, then pimpl) points to
// its C++ state, a greenlet::UserGreenlet or greenlet::MainGreenlet (both
// derive from greenlet::Greenlet, whose first field after the vtable
// pointer is _self, back to the PyGreenlet). Offsets are from the start of
// that C++ object.
type Layout struct {
	Greenlet string // greenlet.__version__
	Minor    int    // CPython 3.Minor the extension was built for
	Source   string // where the numbers come from

	Pimpl uint64 // PyGreenlet.pimpl

	Self         uint64 // Greenlet._self (PyGreenlet*)
	StackStart   uint64 // Greenlet.stack_state._stack_start: NULL once dead
	StackStop    uint64 // Greenlet.stack_state.stack_stop: NULL until started; (char*)-1 in a main greenlet
	TopFrame     uint64 // Greenlet.python_state._top_frame: PyFrameObject* while suspended, NULL while running
	CurrentFrame uint64 // Greenlet.python_state.current_frame (3.11+): the saved _PyInterpreterFrame*; 0: none (3.10)

	MainGreenlet uint64 // UserGreenlet._main_greenlet: its thread's main greenlet (PyGreenlet*)
	RunCallable  uint64 // UserGreenlet._run_callable: set until it starts
	Parent       uint64 // UserGreenlet._parent (PyGreenlet*)
	ThreadState  uint64 // MainGreenlet._thread_state (greenlet::ThreadState*)

	TSCurrent uint64 // ThreadState.current_greenlet (PyGreenlet*)
	Size      uint64 // bytes read from the C++ object: covers every field above
}

// layouts: one entry per greenlet release and CPython minor, each tagged
// with its source. TestLayoutsMatchDWARF reads the same offsets out of the
// DWARF of the wheels scripts/pypkgs.sh installed on every test run, and the
// real-target tests check the reads (_self pointing back, frames that match
// the target's own gr_frame).
var layouts = []Layout{
	// greenlet 3.5.6, PyPI manylinux x86_64 wheels (they ship DWARF):
	// gdb `ptype /o greenlet::Greenlet / UserGreenlet / MainGreenlet /
	// ThreadState` and `PyGreenlet` on _greenlet.cpython-3XY-x86_64-linux-gnu.so.
	// 3.10: PythonState has _top_frame, cframe, use_tracing, recursion_depth,
	// trash_delete_nesting (no interpreter frames); 3.11–3.13 add
	// current_frame and the data stack; 3.14+ add current_executor,
	// stackpointer, delete_later and critical_section before it.
	{Greenlet: "3.5.6", Minor: 10, Source: "DWARF of greenlet 3.5.6 cp310 wheel",
		Pimpl: 32, Self: 8, StackStart: 72, StackStop: 80, TopFrame: 120, CurrentFrame: 0,
		MainGreenlet: 152, RunCallable: 160, Parent: 168, ThreadState: 160, TSCurrent: 8},
	{Greenlet: "3.5.6", Minor: 11, Source: "DWARF of greenlet 3.5.6 cp311 wheel",
		Pimpl: 32, Self: 8, StackStart: 56, StackStop: 64, TopFrame: 104, CurrentFrame: 136,
		MainGreenlet: 168, RunCallable: 176, Parent: 184, ThreadState: 176, TSCurrent: 8},
	{Greenlet: "3.5.6", Minor: 12, Source: "DWARF of greenlet 3.5.6 cp312 wheel",
		Pimpl: 32, Self: 8, StackStart: 56, StackStop: 64, TopFrame: 104, CurrentFrame: 136,
		MainGreenlet: 168, RunCallable: 176, Parent: 184, ThreadState: 176, TSCurrent: 8},
	{Greenlet: "3.5.6", Minor: 13, Source: "DWARF of greenlet 3.5.6 cp313 wheel",
		Pimpl: 32, Self: 8, StackStart: 56, StackStop: 64, TopFrame: 104, CurrentFrame: 136,
		MainGreenlet: 168, RunCallable: 176, Parent: 184, ThreadState: 176, TSCurrent: 8},
	{Greenlet: "3.5.6", Minor: 14, Source: "DWARF of greenlet 3.5.6 cp314 wheel",
		Pimpl: 32, Self: 8, StackStart: 56, StackStop: 64, TopFrame: 104, CurrentFrame: 152,
		MainGreenlet: 184, RunCallable: 192, Parent: 200, ThreadState: 192, TSCurrent: 8},
	{Greenlet: "3.5.6", Minor: 15, Source: "DWARF of greenlet 3.5.6 cp315 wheel",
		Pimpl: 32, Self: 8, StackStart: 56, StackStop: 64, TopFrame: 104, CurrentFrame: 152,
		MainGreenlet: 184, RunCallable: 192, Parent: 200, ThreadState: 192, TSCurrent: 8},
}

func init() {
	for i := range layouts {
		l := &layouts[i]
		l.Size = max(l.Self, l.StackStart, l.StackStop, l.TopFrame, l.CurrentFrame, l.MainGreenlet, l.RunCallable, l.Parent, l.ThreadState) + 8
	}
}

// UnknownLayoutError: no layout for this greenlet release on this CPython.
type UnknownLayoutError struct {
	Version string
	Minor   int
}

func (e *UnknownLayoutError) Error() string {
	return fmt.Sprintf("greenlet %s on CPython 3.%d: layout unknown (known: %s)", e.Version, e.Minor, strings.Join(KnownVersions(e.Minor), ", "))
}

// KnownVersions lists the greenlet releases with a layout for CPython 3.minor.
func KnownVersions(minor int) []string {
	var out []string
	for _, l := range layouts {
		if l.Minor == minor {
			out = append(out, l.Greenlet)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		out = []string{"none for this CPython"}
	}
	return out
}

// LayoutFor finds the layout of a greenlet release built for CPython 3.minor.
func LayoutFor(version string, minor int) (*Layout, error) {
	for i := range layouts {
		if layouts[i].Greenlet == version && layouts[i].Minor == minor {
			l := layouts[i]
			return &l, nil
		}
	}
	return nil, &UnknownLayoutError{Version: version, Minor: minor}
}
