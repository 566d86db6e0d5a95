package pyframes

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestAsyncioLegacyLayout: the 3.12/3.13 offset table agrees with what the
// live interpreter measures about itself with ctypes (asyncio_layout.py
// finds known objects' addresses inside a Task, a coroutine, its frame, a
// set, a weakref and a type).
func TestAsyncioLegacyLayout(t *testing.T) {
	for _, c := range []struct {
		label string
		minor int
	}{{"pyenv-3.12", 12}, {"pyenv-3.13", 13}} {
		t.Run(c.label, func(t *testing.T) {
			in := testutil.Find(t, c.label)
			argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "asyncio_layout.py"))
			r := testutil.RunCmd(t, 30*time.Second, exec.Command(argv[0], argv[1:]...))
			if r.Code != 0 {
				t.Fatalf("asyncio_layout.py: exit %d: %s", r.Code, r.Stderr)
			}
			var m struct {
				TaskSize      int64          `json:"task_size"`
				TaskFutWaiter int64          `json:"task_fut_waiter"`
				TaskCoro      int64          `json:"task_coro"`
				TaskName      int64          `json:"task_name"`
				FutState      int64          `json:"fut_state"`
				GenIFrame     int64          `json:"gen_iframe"`
				GenFrameState int64          `json:"gen_frame_state"`
				FrameStacktop int64          `json:"frame_stacktop"`
				SetUsed       int64          `json:"set_used"`
				SetMask       int64          `json:"set_mask"`
				SetTable      int64          `json:"set_table"`
				WeakrefObject int64          `json:"weakref_object"`
				TypeBase      int64          `json:"type_base"`
				States        map[string]int `json:"states"`
				Resume        []int          `json:"resume"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
				t.Fatalf("%v: %s", err, r.Stdout)
			}
			lt := legacyAsyncLayouts[c.minor]
			for _, f := range []struct {
				name       string
				table, got int64
			}{
				{"task size", int64(lt.taskSize), m.TaskSize}, {"task_fut_waiter", int64(lt.taskFutWaiter), m.TaskFutWaiter},
				{"task_coro", int64(lt.taskCoro), m.TaskCoro}, {"task_name", int64(lt.taskName), m.TaskName},
				{"fut_state", int64(lt.futState), m.FutState},
				{"gi_iframe", int64(lt.genIFrame), m.GenIFrame}, {"gi_frame_state", int64(lt.genFrameState), m.GenFrameState},
				{"frame stacktop", int64(lt.frameStackTop), m.FrameStacktop}, {"set used", int64(lt.setUsed), m.SetUsed},
				{"set mask", int64(lt.setMask), m.SetMask}, {"set table", int64(lt.setTable), m.SetTable},
				{"wr_object", int64(lt.weakrefObject), m.WeakrefObject}, {"tp_base", int64(lt.typeBase), m.TypeBase},
				{"FRAME_CREATED", int64(lt.states.created), int64(m.States["created"])},
				{"suspended in await", int64(lt.states.yieldFrom), int64(m.States["suspended_await"])},
				{"FRAME_EXECUTING", int64(lt.states.executing), int64(m.States["executing"])},
			} {
				if f.table != f.got {
					t.Errorf("%s: table %d, the interpreter measures %d", f.name, f.table, f.got)
				}
			}
			if lt.resumeOps[0] != 0 && (len(m.Resume) != 2 || int(lt.resumeOps[0]) != m.Resume[0] || int(lt.resumeOps[1]) != m.Resume[1]) {
				t.Errorf("RESUME opcodes: table %v, opcode.opmap %v", lt.resumeOps, m.Resume)
			}
		})
	}
}
