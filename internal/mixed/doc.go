// Package mixed glues a thread's Python frames into its native stack: the
// pure merge rules shared by record --native (a sampled native stack, a
// Python stack read just after) and dump --native (both read while the
// thread is stopped).
//
// Truth it reads: nothing by itself. It is given native frames root first
// with their stack pointers (internal/unwind) and Python frames innermost
// first with the C-stack address of each run's link (internal/pyframes,
// Options.Links), and matches them by address: a run's link lies inside
// the native frame of the eval loop that runs it.
//
// Cannot see: which unnamed native function is the interpreter until a
// link is found inside one of its frames (binaries stripped to .dynsym);
// before that, an unnamed eval frame whose Python frames returned before
// the read stays a plain unnamed frame. Without links (3.10, or a read
// without Options.Links) it can only count: runs against eval frames.
package mixed
