// Package remoteexec runs a Python script inside a running CPython 3.14+
// process through the interpreter's own remote-debugging protocol (PEP 768),
// from Go, without ptrace.
//
// How: the debug-offsets table at the start of _PyRuntime (cookie, version,
// debugger_support group) locates, in the chosen thread's PyThreadState,
// the _PyRemoteDebuggerSupport block and the eval_breaker word. pyobs writes
// the path of a generated script into debugger_script_path, sets
// debugger_pending_call to 1 and ORs _PY_EVAL_PLEASE_STOP_BIT (1<<5) into
// eval_breaker, each with process_vm_writev. At its next safe point (a
// backward jump, a call, a signal check) that thread runs the script: a
// one-line trampoline that runs the generated wrapper under the file name
// "<pyobs exec>" (so tracemalloc tells its allocations apart). The wrapper
// runs the user's source in fresh globals, sends what the source prints from
// its thread and any exception to files pyobs created in the target's /tmp
// (owned by the target's user, mode 0600, in a 0700 directory), and catches
// everything, so the target keeps going. The wrapper deletes its file when
// it starts, which is how pyobs knows the safe point was reached (the
// trampoline then finds no file: a request moved to another thread, or
// taken twice, runs once).
// pyobs holds a flock on the directory's lock file while it lives: a
// request taken after pyobs died runs nothing and removes the directory.
// On a timeout pyobs clears debugger_pending_call again (withdraws); with
// AnyThread, a request the main thread has not taken after a moment is
// withdrawn and moved to a thread that is running.
//
// Price: cooperation. Nothing is stopped; the chosen thread runs the script
// holding the GIL, so the target is paused (GIL builds) for as long as the
// script runs. Writing the request is three small writes.
//
// Truth read: the interpreter's own config.remote_debug flag (off with
// -X disable-remote-debug or PYTHON_DISABLE_REMOTE_DEBUG), the version in
// the debug-offsets table (3.14+ only), the interpreter binary's .rodata
// (a build configured --without-remote-debug lacks the audit event name
// "cpython.remote_debugger_script"), /proc/PID/task/TID/syscall for what a
// thread that never reached a safe point is blocked in.
//
// Cannot see / cannot do: a thread blocked in a syscall or in native code
// runs nothing until it comes back to the eval loop; --nudge sends a
// signal that interrupts the syscall, and only a signal the target already
// catches does (CPython catches only SIGINT by default, whose handler raises
// KeyboardInterrupt: never sent unless asked by name); a signal asked by
// name must be one the target catches (CheckNudgeSignal: never KILL or STOP,
// never one whose default action would end it). An audit hook in
// the target may refuse the script. Output the script writes to file
// descriptors 1/2 directly (os.write, C extensions) is not captured: only
// sys.stdout/sys.stderr writes from the script's own thread are.
package remoteexec
