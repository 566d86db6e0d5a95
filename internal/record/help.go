package record

// Help is `pyobs record --help`'s long text.
const Help = `record samples the target and writes a flame graph or profile.

--mode cpu (default): the kernel samples each thread's CPU time (task-clock,
  F Hz of CPU time). With the bpf engine (--engine auto|bpf; auto falls back
  to perf, saying why in one line) an eBPF program on one event per CPU,
  filtered by the target's pid, walks the sampled thread's Python stack in
  the kernel at the sample's instant: every thread, also ones born during
  the recording, from their first sample; pyobs only names the code objects
  (cached, re-checked). Price: ~2-5 µs of kernel time per sample, in the
  target's context. Native frames only with --native; stacks deeper than 128
  frames come out as [truncated stack] with their innermost frames, a stack
  read while a frame was being linked to its caller (a generator resuming)
  as [callers missing] with the frames read (both counted truncated); a frame
  on a page not present in memory can't be read there ([faulted: page not
  present]); each is counted, never guessed. With --engine perf, and always
  with --async, --greenlets, --mode wall and gil:
  ` + UserSpaceNote + ` (perf engine: one ring per
  thread, then a read of that thread's Python stack; a thread may have moved
  on: [late read], torn reads counted).
  Off-CPU time is invisible in cpu mode by construction: use --mode wall
  or pyobs offcpu.
--mode wall: a timer reads every thread's stack at F Hz, running or not; each
  stack ends in the thread's state ([running], [sleeping in …]).
--mode gil: a timer reads the stack of the thread holding the GIL ([GIL free]
  when nobody holds it).
--native (cpu mode): each sample also copies the thread's user registers and
  --stack-size bytes of its stack; pyobs unwinds them with the ELF files'
  .eh_frame CFI and replaces each _PyEval_EvalFrameDefault frame with the
  Python frames it runs: by address where each run of Python frames links
  to its eval loop's C stack (3.12+ on the bpf engine, 3.11+ on perf),
  else by count. On the bpf engine the copy is taken by the same program,
  at the same instant, as the Python walk: an eval loop whose Python frame
  is being entered or left shows [Python frame entering or leaving] (3.10
  and 3.11 binaries without the eval loop's symbol go to the perf engine,
  saying so). On the perf engine the Python stack is read just after the
  sample: frames entered since are left out, eval loops that returned since
  show [Python frames returned before read], and a stack deeper than 4096
  frames its innermost 4096 under [truncated stack]. Stacks deeper than the copy end
  in [truncated native stack]; samples whose native and Python stacks
  disagree are kept unmerged under [merge mismatch] and counted.
--kernel (cpu mode): kernel frames (SYMBOL_[k]) from the sample's callchain;
  on the bpf engine the same program takes it (a stack the kernel's stack
  map had no room for is [kernel stack lost], counted).
--async (CPython 3.14+): a sample of a thread that is running an asyncio task
  is rooted at "[task] NAME" frames, the tasks awaiting it first (outermost
  awaiter first; the lowest-addressed one when several await a task), then
  the task's own coroutine and what it calls; the event loop's frames below
  the coroutine are dropped. Samples outside any task keep the loop's frames.
  Read from the thread state's running task and each task's awaited_by;
  before 3.14 no such per-thread record exists: pyobs exits with status 5.
--greenlets (greenlet 3.x, gevent): each sample is rooted at "[greenlet] NAME"
  frames: its thread's main greenlet, the parents (gevent's Hub), then the
  greenlet that ran, named by its outermost function. Read from greenlet's
  per-thread state (its current greenlet) around the stack read; a switch in
  between leaves the sample unrooted, counted. Perf engine only.

Several processes (cpu mode, bpf engine): -- CMD follows what CMD forks or
  spawns, from each child's first instruction; -p PID --children, -p 1,2,3,
  --cgroup DIR and --all take a set. Each stack is rooted at "[pid N] argv"
  when more than one process was seen; the end of the run lists them (how
  each joined, samples, CPU seconds, exited, refused and why: a process of
  another CPython build is never walked). The other engines and modes
  record the target alone.

A target (or some of its threads) stopped by someone else during the
  recording — SIGSTOP or job control (state T), a tracer (state t) — runs
  nothing and is not sampled: the end of the run says so (how many
  threads, about how long; looks every 100 ms), so a thin or empty profile
  is not taken for an idle program.

Price: sampling. The target is never stopped. The end of the run reports
which engine took the stacks, requested vs achieved rate, samples exact
(bpf), truncated, faulted, lost, torn, failed, the BPF run time per sample
(from the kernel's bpf stats, turned on for the run only when they are off)
and pyobs's own CPU. Ctrl-C ends the recording early and still writes the
output.

-d 0s (the default) records until Ctrl-C or the target's exit. -F is per
thread; in cpu mode it is capped at kernel.perf_event_max_sample_rate (the
most the kernel delivers per CPU), and wall/gil mode above 1000 Hz say at the
start that ticks will be dropped; the footer gives the achieved rate.`
