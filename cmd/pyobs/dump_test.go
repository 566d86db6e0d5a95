package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/testutil"
)

type truthFile struct {
	Pid     int `json:"pid"`
	Threads []struct {
		ThreadID uint64 `json:"thread_id"`
		Name     string `json:"name"`
		Tid      int    `json:"tid"`
		Frames   []struct {
			Function string `json:"function"`
			File     string `json:"file"`
			Line     int    `json:"line"`
		} `json:"frames"`
	} `json:"threads"`
}

func dumpJSON(t *testing.T, args ...string) *dump.Dump {
	t.Helper()
	r := testutil.Run(t, 60*time.Second, append([]string{"dump", "--format", "json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("pyobs dump %v: exit %d, stderr: %s", args, r.Code, r.Stderr)
	}
	var d dump.Dump
	if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
		t.Fatalf("dump output is not JSON: %v\n%s", err, r.Stdout)
	}
	return &d
}

// TestDumpMatchesCurrentFrames: on every interpreter, a target with named
// threads parked in known places reports sys._current_frames(); pyobs's dump
// must match it exactly: every frame's function, file and line, innermost
// first, and every thread's name and kernel TID.
func TestDumpMatchesCurrentFrames(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		for _, lock := range []bool{false, true} {
			name := in.Label
			if lock {
				name += "/lock"
			}
			t.Run(name, func(t *testing.T) { checkDumpMatchesTruth(t, in, lock, false) })
		}
	}
}

// checkDumpMatchesTruth dumps stacks.py (with --lock or not) and compares
// every thread with what the target's own sys._current_frames() reported;
// on a free-threaded build no thread may hold a GIL.
func checkDumpMatchesTruth(t *testing.T, in testutil.Interp, lock, freeThreaded bool) {
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	tg := testutil.Start(t, in, "stacks.py", truthPath)
	var truth truthFile
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", fmt.Sprint(tg.Pid)}
	if lock {
		args = append(args, "--lock")
	}
	d := dumpJSON(t, args...)
	if want := in.Version; d.Python.Version != want { // 3.10's micro included
		t.Errorf("python version %q, want %q", d.Python.Version, want)
	}
	got := map[uint64]dump.ThreadDump{}
	for _, th := range d.Threads {
		got[th.ThreadID] = th
	}
	if len(truth.Threads) != 5 {
		t.Fatalf("target reported %d threads, want 5", len(truth.Threads))
	}
	for _, want := range truth.Threads {
		th, ok := got[want.ThreadID]
		if !ok {
			t.Errorf("thread %q (0x%x) missing from the dump", want.Name, want.ThreadID)
			continue
		}
		if th.Name != want.Name {
			t.Errorf("thread 0x%x: name %q, want %q", want.ThreadID, th.Name, want.Name)
		}
		if th.Tid != want.Tid {
			t.Errorf("thread %q: tid %d, want %d", want.Name, th.Tid, want.Tid)
		}
		if !th.Consistent {
			t.Errorf("thread %q: parked thread read inconsistently: %s", want.Name, th.Error)
		}
		if len(th.Frames) != len(want.Frames) {
			t.Errorf("thread %q: %d frames, want %d\n got: %v\nwant: %v", want.Name, len(th.Frames), len(want.Frames), th.Frames, want.Frames)
			continue
		}
		for i, wf := range want.Frames {
			gf := th.Frames[i]
			if gf.Function != wf.Function || gf.File != wf.File || gf.Line != wf.Line {
				t.Errorf("thread %q frame %d: got %s (%s:%d), want %s (%s:%d)", want.Name, i, gf.Function, gf.File, gf.Line, wf.Function, wf.File, wf.Line)
			}
		}
		delete(got, want.ThreadID)
	}
	for _, extra := range got {
		if extra.Name != "reporter" { // the reporter may not have exited yet
			t.Errorf("unexpected thread in dump: %+v", extra)
		}
	}
	holders := 0
	for _, th := range d.Threads {
		if th.HoldsGIL {
			holders++
		}
	}
	if holders > 1 {
		t.Errorf("%d threads hold the GIL", holders)
	}
	if lock && d.Read.Method != "ptrace-stopped" {
		t.Errorf("--lock: read method %q", d.Read.Method)
	}
	st := testutil.ProcStatus(tg.Pid)
	if st["TracerPid"] != "0" || strings.HasPrefix(st["State"], "t") || strings.HasPrefix(st["State"], "T") {
		t.Errorf("target left traced or stopped: TracerPid %s, State %s", st["TracerPid"], st["State"])
	}
}
