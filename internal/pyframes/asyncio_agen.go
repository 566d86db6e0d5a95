package pyframes

// Async generators in an await chain. `async for` over an async generator
// awaits an async_generator_asend; __anext__() and asend() make one,
// athrow() and aclose() an async_generator_athrow. Neither is a coroutine:
// while one is being awaited (its state ITER), it runs its async generator's
// own frame, which in turn awaits what the generator awaits. So the chain
// goes on from the awaitable to its generator while the generator runs for
// an awaitable (ag_running_async set, which is what CPython's own unwinder
// follows since gh-159620), and from the generator's frame like any
// coroutine's.
//
// Layout (Objects/genobject.c, PyAsyncGenASend / PyAsyncGenAThrow, the same
// in 3.12–3.15; measured with ctypes on 3.12.1, 3.13.0, 3.14.10, 3.15.2):
// {PyObject_HEAD; PyAsyncGenObject *gen; PyObject *sendval_or_args;
// AwaitableState state}, state INIT 0, ITER 1, CLOSED 2. 3.15's athrow for
// aclose() stays INIT while it runs its generator: the state only rules out
// CLOSED; the generator's ag_running_async decides.
// PyAsyncGenObject's char ag_running_async is at 66 in 3.12–3.15
// (_PyGenObject_HEAD: …, origin_or_finalizer @56, hooks_inited @64,
// closed @65, running_async @66; measured on the same builds).
const (
	agenAwaitableGen   = 16 // ags_gen / agt_gen (after PyObject_HEAD on GIL builds)
	agenAwaitableState = 32 // ags_state / agt_state (an enum, int)
	agenAwaitableSize  = agenAwaitableState + 4
	awaitableClosed    = 2  // AWAITABLE_STATE_CLOSED
	agenRunningAsync   = 66 // PyAsyncGenObject.ag_running_async
)

func isAgenAwaitable(typeName string) bool {
	return typeName == "async_generator_asend" || typeName == "async_generator_athrow"
}

// agenOf returns the async generator of an async_generator_asend/athrow,
// given the object's first bytes; 0 when it is closed (the chain ends at the
// awaitable). The caller goes on only if that generator runs (agenRunning).
// g is how much bigger the object header is (free-threaded builds: 16).
func agenOf(b []byte, g uint64) uint64 {
	if uint64(len(b)) < agenAwaitableSize+g || le32(b, agenAwaitableState+g) == awaitableClosed {
		return 0
	}
	return le64(b, agenAwaitableGen+g)
}

// agenRunning: the async generator whose first bytes are b is running for
// an asend/athrow (ag_running_async).
func agenRunning(b []byte, g uint64) bool {
	return uint64(len(b)) > agenRunningAsync+g && b[agenRunningAsync+g] != 0
}
