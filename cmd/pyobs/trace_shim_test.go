package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// Two wrappers whose files name no interpreter (bash scripts, as pyenv's
// shims are): one execs the interpreter (same pid), one runs it as a
// child and exits with its status.
const (
	wrapperExec  = "#!/bin/bash\n# a shim: the interpreter replaces it\nexec \"$@\"\n"
	wrapperChild = "#!/bin/bash\n# the interpreter as a child, the script going on after it\n\"$@\"\nstatus=$?\nexit $status\n"
)

// TestTraceThroughWrapper: trace -- WRAPPER PYTHON trace_family.py
// --exec-child N, WRAPPER a bash script (its files name no interpreter,
// as pyenv's python3 shim): the python it execs, or runs as a child, has
// its N failing rmdir calls (its own count) counted exactly and named by
// their whole path at their lines — fail (the rmdir) ← exec_fail ←
// <module> — the walk's layout taken from the interpreter once it is up;
// the calls not named are said (not found, before the walk). With a CPU
// hog beside.
func TestTraceThroughWrapper(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	const n = 2000
	script := filepath.Join(testutil.Repo(), "testdata", "targets", "trace_family.py")
	// The lines the calls are made at, from the script itself.
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Split(string(b), "\n")
	rmdirLine := lineOf(t, src, "os.rmdir(MISSING)")
	execLine := lineOf(t, src, "def exec_fail(n):") + 1 // return fail(n)
	moduleLine := lineOf(t, src, "report(out, role, (reexec_fail")
	type tcase struct {
		name, wrapper string
		in            testutil.Interp
	}
	var cases []tcase
	for _, in := range testutil.Interpreters(t) {
		cases = append(cases, tcase{"exec/" + in.Label, wrapperExec, in})
	}
	cases = append(cases, tcase{"exec/ft-3.13t", wrapperExec, testutil.Find(t, "ft-3.13t")},
		tcase{"child/pyenv-3.12", wrapperChild, testutil.Find(t, "pyenv-3.12")})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			wrapper, report, o := filepath.Join(dir, "wrapper"), filepath.Join(dir, "report"), filepath.Join(dir, "t.json")
			if err := os.WriteFile(wrapper, []byte(c.wrapper), 0o755); err != nil {
				t.Fatal(err)
			}
			argv := append([]string{"trace", "-e", "rmdir", "--format", "json", "-o", o, "--", wrapper}, c.in.Argv...)
			argv = append(argv, script, "--exec-child", strconv.Itoa(n), report)
			r := runPyobs(t, os.Environ(), argv...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			truth := familyTruth(t, report)
			if got := truth["exec"][1]; got != n {
				t.Fatalf("the target's report %v: want %d calls", truth, n)
			}
			j := readFamily(t, o)
			w := j.PythonWalk
			if w == nil || !w.On || !strings.HasPrefix(w.HeldLayout, "taken from the interpreter once up") {
				t.Fatalf("python_walk %+v: want on, its layout taken from the interpreter once up (site error %q)\n%s", w, j.SiteError, r.Stderr)
			}
			var calls, named uint64
			for _, s := range j.Syscalls {
				if s.Name != "rmdir" {
					continue
				}
				calls = s.Calls
				for _, p := range s.TopPaths {
					var got []string
					for _, f := range p.Frames {
						got = append(got, f.Function+"@"+filepath.Base(f.File)+":"+strconv.Itoa(f.Line))
					}
					at := func(fn string, line int) string { return fn + "@trace_family.py:" + strconv.Itoa(line) }
					want := []string{at("fail", rmdirLine), at("exec_fail", execLine), at("<module>", moduleLine)}
					if strings.Join(got, " ") != strings.Join(want, " ") {
						t.Errorf("path %v (%d calls): want %v", got, p.Calls, want)
						continue
					}
					named += p.Calls
				}
			}
			if calls != n {
				t.Errorf("rmdir: %d calls counted, the target made %d", calls, n)
			}
			// Its first calls may come before the walk is on (its
			// interpreter read at startLook): counted, not named.
			if named+j.SiteFailed+w.BeforeWalk != n || named < n*9/10 {
				t.Errorf("%d named + %d not found + %d before the walk, of %d calls: want all accounted for and ≥ 90 %% named (%s)",
					named, j.SiteFailed, w.BeforeWalk, n, j.SiteError)
			}
			t.Logf("%d of %d named, %d before the walk; %s", named, n, w.BeforeWalk, w.HeldLayout)
		})
	}
}
