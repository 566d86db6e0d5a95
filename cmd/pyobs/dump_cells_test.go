package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDumpLocalsCells: cell variables, an argument captured by a closure
// and free variables show in dump --locals with their values, each once,
// as the target's own locals() says (3.10 keeps them in cells after its
// co_nlocals slots; 3.11+ in kinds-marked slots).
func TestDumpLocalsCells(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata/targets/locals_cells.py")), 30*time.Second)
			var truth map[string]map[string]localTruth
			select {
			case line := <-tg.Lines:
				if err := json.Unmarshal([]byte(line), &truth); err != nil {
					t.Fatalf("bad truth line %q: %v", line, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("target printed no truth line")
			}
			out := filepath.Join(t.TempDir(), "locals.json")
			r := testutil.Run(t, 30*time.Second, "dump", "--locals", "--format", "json", "-o", out, "-p", fmt.Sprint(tg.Pid))
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			b, _ := os.ReadFile(out)
			var d struct {
				Threads []struct {
					Frames []struct {
						Function string
						Locals   []struct{ Name, Type, Value string }
					}
				}
			}
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			for _, fn := range []string{"outer", "parked"} {
				var got map[string][]localTruth
				for _, th := range d.Threads {
					for _, f := range th.Frames {
						if f.Function == fn || strings.HasSuffix(f.Function, "."+fn) { // 3.11+: the qualified name
							got = map[string][]localTruth{}
							for _, l := range f.Locals {
								got[l.Name] = append(got[l.Name], localTruth{l.Type, l.Value})
							}
						}
					}
				}
				if got == nil {
					t.Fatalf("no frame %q in dump: %s", fn, b)
				}
				if len(truth[fn]) < 3 {
					t.Fatalf("truth for %s: %v", fn, truth[fn])
				}
				for name, w := range truth[fn] {
					g := got[name]
					switch {
					case len(g) == 0:
						t.Errorf("%s: local %s missing (want %s %s)", fn, name, w.Type, w.Value)
					case len(g) > 1:
						t.Errorf("%s: local %s shown %d times: %v", fn, name, len(g), g)
					case g[0] != w:
						t.Errorf("%s: local %s = %s (%s), want %s (%s)", fn, name, g[0].Value, g[0].Type, w.Value, w.Type)
					}
				}
			}
		})
	}
}
