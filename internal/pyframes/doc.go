// Package pyframes reads CPython's own state out of another process's memory:
// interpreters → thread states → frames → code objects → qualified name,
// file and line, plus threading's thread names, the GIL holder and, on
// request, simple locals.
//
// What truth it reads: the interpreter's memory, through a Memory
// (process_vm_readv, /proc/PID/mem as a fallback; a Snapshot in tests). The
// interpreter is found by ELF — the mapped file that defines _PyRuntime in
// .dynsym or as the .PyRuntime section — never by /proc/PID/exe, which is the
// dynamic loader for targets started through ld.so. 3.13+ publish their
// layout in the _Py_DebugOffsets table at the start of _PyRuntime (checked:
// cookie, version, sizes); 3.10–3.12 use one table per version (layout.go),
// each tagged with its source.
//
// Price: introspection. A thread's stack costs a few batched reads — the
// thread state, 4 pages of its frame stack below the top frame, then one
// 2-page read per region of frames outside it (older data-stack chunks,
// generators' heap frames, 3.10 frame objects), a re-check — plus one per
// new code object (cached, and re-validated by its header), with no stop: the
// target runs on. Reads race the target; a walk is accepted only if the
// thread's top frame is the same after the walk as before it and the chain
// reaches the thread's outermost frame (framemodel.go: the per-version
// frame-ownership and completeness rules, shared with the in-kernel walker),
// else it is retried and then reported inconsistent — never guessed.
//
// Free-threaded builds (3.13t, 3.14t; freethreaded.go) are read from their
// debug-offsets table: a bigger object header, other str state bits,
// thread-local bytecode copies (one more read per frame running one). They
// have no GIL: no thread is reported holding one, and no wait is a GIL wait.
//
// What it cannot see: native (C) frames, what happened between two reads,
// a GIL a free-threaded interpreter re-enabled at run time (for an
// extension not declared free-threading safe), and versions outside
// 3.10–3.15 (refused with the supported range named).
package pyframes
