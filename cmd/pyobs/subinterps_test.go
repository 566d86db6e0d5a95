package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpInterpreterIDs: the main interpreter and two sub-interpreters,
// each with a thread of its own. Threads carry the runtime's own
// interpreter id (PyInterpreterState.id: main = 0), not the interpreter's
// position in the runtime's list (newest first), 3.12+.
func TestDumpInterpreterIDs(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "subinterps.py")
			var ids []int64
			select {
			case line := <-tg.Lines:
				for _, f := range strings.Fields(strings.TrimPrefix(line, "IDS")) {
					var v int64
					fmt.Sscan(f, &v)
					ids = append(ids, v)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("target did not report its sub-interpreter ids")
			}
			if len(ids) != 2 || ids[0] == 0 || ids[1] == 0 || ids[0] == ids[1] {
				t.Fatalf("sub-interpreter ids %v", ids)
			}
			d := dumpJSON(t, "-p", fmt.Sprint(tg.Pid))
			found := map[string]int64{}
			for _, th := range d.Threads {
				for _, f := range th.Frames {
					switch f.Function {
					case "main_park":
						found["main"] = th.Interp
					case "sub_park":
						found[th.Name] = th.Interp
					}
				}
			}
			want := map[string]int64{"main": 0, fmt.Sprintf("sub-%d", ids[0]): ids[0], fmt.Sprintf("sub-%d", ids[1]): ids[1]}
			for k, v := range want {
				if got, ok := found[k]; !ok || got != v {
					t.Errorf("thread %s: interpreter %d (found %v), want %d", k, got, ok, v)
				}
			}
		})
	}
}
