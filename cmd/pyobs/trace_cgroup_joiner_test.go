//go:build amd64

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// cgroupJoiner moves itself into the cgroup argv[1] once the file argv[2]
// exists, fails 200 rmdirs at once (the first within microseconds of its
// join, milliseconds before pyobs can have read its interpreter), then, a
// second later, 20 more from another function, and lingers for their
// names to be read.
const cgroupJoiner = `
import os, sys, time
cg, gate = sys.argv[1], sys.argv[2]
while not os.path.exists(gate):
    time.sleep(0.01)
def burst(n):
    for i in range(n):
        try:
            os.rmdir("/nonexistent-pyobs/%d" % i)
        except OSError:
            pass
def later(n):
    burst(n)
with open(os.path.join(cg, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
burst(200)
time.sleep(1)
later(20)
time.sleep(1)
`

// TestTraceCgroupJoinerUnread: a python that enters a traced cgroup (an
// interpreter of the target's build at its own addresses) and fails calls
// at once: the calls made before pyobs read its interpreter are walked
// with the target's addresses and fail the walk's checks; they are said
// to be unnamed for that reason, never as torn chains, and its calls
// after are named.
func TestTraceCgroupJoinerUnread(t *testing.T) {
	testutil.RequireRoot(t)
	cg := makeV2Cgroup(t)
	py := testutil.Find(t, "pyenv-3.12")
	// The target: in the cgroup from the start, idle.
	seed := startInCgroup(t, cg, py, "import sys, time\nprint('READY', flush=True)\nsys.stdin.readline()\ntime.sleep(30)")
	dir := t.TempDir()
	script, gate := filepath.Join(dir, "j.py"), filepath.Join(dir, "go")
	if err := os.WriteFile(script, []byte(cgroupJoiner), 0o644); err != nil {
		t.Fatal(err)
	}
	j := exec.Command(py.Argv[0], append(append([]string{}, py.Argv[1:]...), script, cg, gate)...)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Process.Kill(); _ = j.Wait() })
	js := filepath.Join(dir, "t.json")
	pyobs := exec.Command(testutil.Binary(t), "trace", "--cgroup", cg, "-e", "rmdir", "-d", "5s", "--format", "json", "-o", js)
	var stderr strings.Builder
	pyobs.Stderr = &stderr
	if err := pyobs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pyobs.Process.Kill(); _ = pyobs.Wait() })
	testutil.WaitBPFLink(t, pyobs.Process.Pid, 30*time.Second)
	time.Sleep(100 * time.Millisecond) // the set's own links follow the calls'
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pyobs.Wait(); err != nil {
		t.Fatalf("pyobs: %v\n%s", err, stderr.String())
	}
	b, _ := os.ReadFile(js)
	var doc struct {
		Syscalls []struct {
			Name     string            `json:"name"`
			Calls    uint64            `json:"calls"`
			Unattr   uint64            `json:"unattributed"`
			Why      map[string]uint64 `json:"unattributed_why"`
			TopPaths []struct {
				Calls  uint64 `json:"calls"`
				Frames []struct {
					Function string `json:"function"`
				} `json:"frames"`
			} `json:"top_paths"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	t.Logf("seed %d, joiner %d; %s", seed, j.Process.Pid, stderr.String())
	for _, s := range doc.Syscalls {
		if s.Name != "rmdir" {
			continue
		}
		var later uint64
		for _, p := range s.TopPaths {
			for _, f := range p.Frames {
				if f.Function == "later" {
					later += p.Calls
				}
			}
		}
		if s.Calls != 220 || later != 20 {
			t.Errorf("rmdir: %d calls (want 220), %d named under later (want 20)", s.Calls, later)
		}
		if s.Why["frame chain failed a check (torn)"] != 0 || s.Why["interpreter not read yet"] == 0 || s.Why["interpreter not read yet"] != s.Unattr {
			t.Errorf("the joiner's first calls: unattributed %d by %v; want every one as its interpreter not read yet (none torn)", s.Unattr, s.Why)
		}
		if !strings.Contains(string(b), "before pyobs had read its interpreter") {
			t.Errorf("site_read_error does not say why: %s", b)
		}
		return
	}
	t.Fatalf("no rmdir row: %s", b)
}
