package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestTasksCoroutineChain: the running task's coroutine awaits a chain of
// coroutines (c1 → deep recursing 4 deep), each frame in its own heap
// object, the innermost spinning; the other task awaits itself 3 deep down to
// a sleep. On 3.12–3.15, with and without --lock, every dump of the thread is
// complete and consistent — deep ×5 ← c1 ← … ← <module> — never "a caller
// above its callee"; the task tree shows the runner running its c1 and the
// waiter's whole chain.
func TestTasksCoroutineChain(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		for _, lock := range []bool{false, true} {
			name := in.Label
			if lock {
				name += "/lock"
			}
			t.Run(name, func(t *testing.T) {
				tg := testutil.Start(t, in, "asyncio_chain.py")
				args := []string{"-p", fmt.Sprint(tg.Pid)}
				if lock {
					args = append(args, "--lock")
				}
				for i := 0; i < 10; i++ {
					d := tasksJSON(t, args...)
					if d.Stacks == nil || len(d.Stacks.Threads) != 1 {
						t.Fatalf("dump %d: stacks %+v", i, d.Stacks)
					}
					th := d.Stacks.Threads[0]
					var got []string
					for _, f := range th.Frames {
						got = append(got, f.Function)
					}
					s := strings.Join(got, " ← ")
					if !th.Consistent || th.Error != "" {
						t.Errorf("dump %d: thread not consistent (%s): %s", i, th.Error, s)
						continue
					}
					if !strings.HasPrefix(s, "deep ← deep ← deep ← deep ← deep ← c1 ← ") || got[len(got)-1] != "<module>" {
						t.Errorf("dump %d: stack %s, want deep ×5 ← c1 ← … ← <module>", i, s)
					}
					tasks := map[string][]string{}
					for _, tk := range d.Tasks {
						var co []string
						for _, f := range tk.Coroutines {
							co = append(co, f.Function)
						}
						tasks[tk.Name] = co
						if tk.Name == "runner" && !tk.Running {
							t.Errorf("dump %d: runner not running", i)
						}
						if tk.Error != "" {
							t.Errorf("dump %d: task %s: %s", i, tk.Name, tk.Error)
						}
					}
					if r := strings.Join(tasks["runner"], " → "); !strings.HasPrefix(r, "c1") {
						t.Errorf("dump %d: runner's coroutines %q", i, r)
					}
					if w := strings.Join(tasks["waiter"], " → "); w != "waiter_deep → waiter_deep → waiter_deep → sleep" {
						t.Errorf("dump %d: waiter's coroutines %q", i, w)
					}
				}
			})
		}
	}
}

// TestTasksAsyncGenerators: tasks iterating async generators, parked inside
// the generators' awaits. The task's coroutine chain goes on from the
// async_generator_asend/athrow it awaits into the generator's frame, to the
// innermost await: `async for` one and two levels deep, __anext__() as the
// task's own coroutine, aclose() mid-iteration (a finally that awaits), on
// 3.12–3.15.
func TestTasksAsyncGenerators(t *testing.T) {
	testutil.RequireRoot(t)
	want := map[string]string{
		"one":    "consume_one → ticker → sleep",
		"two":    "consume_two → outer_agen → ticker → sleep",
		"anext":  "ticker → sleep",
		"aclose": "closer → slow_close → sleep",
	}
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "asyncio_agen.py")
			d := tasksJSON(t, "-p", fmt.Sprint(tg.Pid))
			seen := 0
			for _, tk := range d.Tasks {
				w, ok := want[tk.Name]
				if !ok {
					continue
				}
				seen++
				var co []string
				for _, f := range tk.Coroutines {
					co = append(co, f.Function)
					if f.Line <= 0 || !strings.HasSuffix(f.File, ".py") {
						t.Errorf("task %s: frame %+v", tk.Name, f)
					}
				}
				if got := strings.Join(co, " → "); got != w || tk.Error != "" {
					t.Errorf("task %s: coroutines %q (error %q, awaiting %q), want %q", tk.Name, got, tk.Error, tk.Awaiting, w)
				}
			}
			if seen != len(want) {
				t.Errorf("%d of the %d tasks found", seen, len(want))
			}
		})
	}
}

// TestNameLimits: a coroutine whose qualname is 1,100 characters, in a task
// named with 300: names are cut where CPython's own unwinder draws the line
// (qualname 1,024, task name 255) and the cut is marked with "…"; the frame
// and the task are still reported (docs/json.md, "Name limits").
func TestNameLimits(t *testing.T) {
	testutil.RequireRoot(t)
	fn := strings.Repeat("f", 1024) + "…"
	task := strings.Repeat("T", 255) + "…"
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "long_names.py")
			d := tasksJSON(t, "-p", fmt.Sprint(tg.Pid))
			found := false
			for _, tk := range d.Tasks {
				if strings.HasPrefix(tk.Name, "TTT") {
					found = true
					if tk.Name != task {
						t.Errorf("task name of %d characters: %.20q…", len([]rune(tk.Name)), tk.Name)
					}
					if len(tk.Coroutines) == 0 || tk.Coroutines[0].Function != fn {
						t.Errorf("task's coroutines %d, first of %d characters", len(tk.Coroutines), len([]rune(first(tk.Coroutines))))
					}
				}
			}
			if !found {
				t.Errorf("no task with the long name among %d", len(d.Tasks))
			}
		})
	}
}

func first(fr []dump.FrameDump) string {
	if len(fr) == 0 {
		return ""
	}
	return fr[0].Function
}
