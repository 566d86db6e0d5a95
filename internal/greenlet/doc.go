// Package greenlet reads every greenlet (greenlet 3.x, and gevent's
// Greenlet on top of it) of a CPython process from outside: its thread, its
// state (running, suspended, not started, dead but still referenced), its
// parent chain, and its Python stack — for a suspended greenlet the frames
// it saved in its C++ state, for the running one its thread's stack. Run
// and WriteText are dump --greenlets.
//
// Truth read: the target's memory, through internal/pyframes. The mapped
// greenlet/_greenlet*.so gives PyGreenlet_Type (its symbol table);
// greenlet.__version__ (read from sys.modules) picks the layout of the C++
// objects behind PyGreenlet.pimpl from one table per greenlet release and
// CPython minor (layout.go, each entry tagged with its source: the wheel's
// own DWARF, checked against it on every test run). Greenlets are found by
// walking the main interpreter's GC lists (every generation, young to
// permanent) and keeping the objects whose type is greenlet or a subtype;
// each one is checked: its C++ state must point back at it. A thread's
// greenlets share its main greenlet, whose greenlet::ThreadState names the
// one running; a thread is matched by its native stack (the main thread's
// [stack], another's pthread mapping) holding its greenlets' C stacks.
//
// Tracker serves record --greenlets: after one full read it tells a
// thread's running greenlet with one 8-byte read (ThreadState's
// current_greenlet), and Chain names it and its parents. offcpu
// --greenlets also calls Rescan periodically and asks Snapshot.Parked which
// greenlets are parked in a gevent wait (parked.go: the rule, from gevent's
// facts: every gevent block is a switch to the hub, and the loop only
// blocks with nothing runnable).
//
// Price: introspection, no stop (--lock stops the threads during the read).
// The GC lists are read page by page (each object's GC header and the head
// of the object; a small gevent program: ~15 k objects in ~1,100 page reads,
// ~10 ms here; 520 k objects: 15 k page reads, 0.3–0.5 s on this loaded
// 2-core VM), then a few reads per greenlet and its frames. The lists are read while the
// target runs: a list that changes under the walk (a node whose prev does
// not point back) is walked again, up to 3 times, then kept as far as it
// was read and counted incomplete; a greenlet freed between the walk and the
// read of its state is left out and counted.
//
// What it cannot see: greenlets that are not GC-tracked or not in the main
// interpreter's lists (subinterpreters; an object in the middle of a
// collection, when the collector has moved it to a private list);
// free-threaded builds (no GC lists; greenlet has no wheels for them);
// greenlet releases or CPython versions without a layout (said in one
// line); native (C, Cython) frames of a greenlet, so a gevent greenlet
// parked in Cython code (Event.wait) shows its last Python frame; which
// watcher or event a parked greenlet waits for (offcpu gives a hub wait to
// every greenlet parked during it, not to the one whose event ended it).
package greenlet
