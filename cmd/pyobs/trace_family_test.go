package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// familyOut is the part of `trace --format json` the family tests read.
type familyOut struct {
	Engine     string `json:"engine"`
	SiteFailed uint64 `json:"site_reads_failed"`
	SiteError  string `json:"site_read_error"`
	PythonWalk *struct {
		On         bool   `json:"on"`
		Why        string `json:"why"`
		HeldLayout string `json:"held_layout"`
		BeforeWalk uint64 `json:"calls_before_walk"`
		Invalid    uint64 `json:"invalid"`
		NoThread   uint64 `json:"no_thread_state"`
	} `json:"python_walk"`
	Syscalls []familyRow `json:"syscalls"`
}

type familyRow struct {
	Name     string `json:"name"`
	Calls    uint64 `json:"calls"`
	TopPaths []struct {
		Calls  uint64 `json:"calls"`
		Frames []struct {
			Function string `json:"function"`
			File     string `json:"file"`
			Line     int    `json:"line"`
		} `json:"frames"`
	} `json:"top_paths"`
}

// familyTruth reads trace_family.py's own report: each role's pid and count.
func familyTruth(t *testing.T, path string) map[string][2]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the target's report: %v", err)
	}
	out := map[string][2]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("report line %q", l)
		}
		pid, _ := strconv.Atoi(f[1])
		n, _ := strconv.Atoi(f[2])
		out[f[0]] = [2]int{pid, n}
	}
	return out
}

// checkFamily: the rmdir row names each process's calls by its own
// function (parent_fail in the parent, forked_fail in the forked child,
// exec_fail in the python the parent ran), never one under another's,
// and every call is accounted for: named, or counted as not named (a
// walk that found no stack, a call before the walk was on).
func checkFamily(t *testing.T, j *familyOut, truth map[string][2]int, n int) {
	t.Helper()
	fn := map[string]string{"parent_fail": "parent", "forked_fail": "forked", "exec_fail": "exec", "reexec_fail": "reexec"}
	for _, role := range []string{"parent", "forked", "exec"} {
		if _, ok := truth[role]; !ok {
			t.Fatalf("the target's report %v lacks %s", truth, role)
		}
	}
	for _, c := range truth {
		if c[1] != n {
			t.Fatalf("the target's report %v: want %d calls from each role", truth, n)
		}
	}
	roles := len(truth)
	var row *familyRow
	for i := range j.Syscalls {
		if j.Syscalls[i].Name == "rmdir" {
			row = &j.Syscalls[i]
		}
	}
	if row == nil || row.Calls != uint64(roles*n) {
		t.Fatalf("rmdir row %+v: want %d calls", row, roles*n)
	}
	named := map[string]uint64{}
	var total uint64
	for _, p := range row.TopPaths {
		var names []string
		for _, f := range p.Frames {
			names = append(names, f.Function)
		}
		// Innermost first: fail, then the role's function, then <module>.
		if len(names) != 3 || names[0] != "fail" || fn[names[1]] == "" || names[2] != "<module>" {
			t.Errorf("path %v (%d calls): want fail <- parent_fail/forked_fail/exec_fail/reexec_fail <- <module>", names, p.Calls)
			continue
		}
		named[fn[names[1]]] += p.Calls
		total += p.Calls
	}
	w := j.PythonWalk
	if w == nil || !w.On {
		t.Fatalf("python_walk %+v: want on (site error %q)", w, j.SiteError)
	}
	if total+j.SiteFailed+w.BeforeWalk != uint64(roles*n) {
		t.Errorf("named %d + not found %d + before the walk %d != %d calls (invalid %d, no thread state %d; %s)",
			total, j.SiteFailed, w.BeforeWalk, roles*n, w.Invalid, w.NoThread, j.SiteError)
	}
	for role, c := range named {
		// The exec'd child's first calls may come before pyobs read its
		// interpreter (its walks fail their checks until its addresses
		// are in the kernel's map: counted, not named); its calls take
		// ~N/10 ms, its start a few.
		if c > uint64(n) || c < uint64(n)*9/10 {
			t.Errorf("%s: %d calls named, the process made %d", role, c, n)
		}
	}
	if len(named) != roles {
		t.Errorf("named per process %v: want all %d", named, roles)
	}
}

// TestTraceFamilySites: trace -- python trace_family.py, the command held
// before its exec (the walk's layout read from its files) and its
// children followed: the failing calls of the parent, of the child it
// forks and of the python it runs are each named by their own whole
// Python path, counted against each process's own count, on every GIL
// interpreter, with a CPU hog beside.
func TestTraceFamilySites(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	const n = 2000
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			dir := t.TempDir()
			report, o := filepath.Join(dir, "report"), filepath.Join(dir, "t.json")
			child, _ := json.Marshal(in.Argv)
			argv := append([]string{"trace", "-e", "rmdir", "--format", "json", "-o", o, "--"}, in.Argv...)
			argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_family.py"),
				"--n", strconv.Itoa(n), "--out", report, "--child-argv", string(child))
			r := runPyobs(t, os.Environ(), argv...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			j := readFamily(t, o)
			checkFamily(t, j, familyTruth(t, report), n)
			if w := j.PythonWalk; w == nil || !strings.HasPrefix(w.HeldLayout, "read from ") {
				t.Errorf("python_walk %+v: want the layout read from the command's files", w)
			}
		})
	}
}

// TestTraceFamilySitesAttached: the same family under trace -p PARENT
// --children, attached before the parent starts its calls.
func TestTraceFamilySitesAttached(t *testing.T) {
	j, truth, _ := traceFamilyAttached(t)
	checkFamily(t, j, truth, familyCalls)
	if w := j.PythonWalk; w != nil && w.HeldLayout != "" {
		t.Errorf("held_layout %q for an attached trace", w.HeldLayout)
	}
}

// TestTraceSeedExecs: under trace -p PARENT --children, the parent itself
// execs a new python once its family is done (same pid, a new program at
// other addresses): its new calls are named through its new program
// (reexec_fail), not read through the reader of the program before.
func TestTraceSeedExecs(t *testing.T) {
	j, truth, pid := traceFamilyAttached(t, "--reexec")
	if truth["reexec"][0] != pid || truth["parent"][0] != pid {
		t.Fatalf("the target's report %v: want parent and reexec both pid %d", truth, pid)
	}
	checkFamily(t, j, truth, familyCalls)
}

// familyCalls is what each process of trace_family.py makes.
const familyCalls = 2000

// traceFamilyAttached runs trace_family.py (with extra flags), attaches
// trace -p PARENT --children before its calls, and returns the output,
// the target's own report and the parent's pid; with a CPU hog beside.
func traceFamilyAttached(t *testing.T, extra ...string) (*familyOut, map[string][2]int, int) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	in := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	report, o := filepath.Join(dir, "report"), filepath.Join(dir, "t.json")
	child, _ := json.Marshal(in.Argv)
	args := append([]string{"--n", strconv.Itoa(familyCalls), "--out", report, "--child-argv", string(child), "--wait-usr1"}, extra...)
	tg := testutil.Start(t, in, "trace_family.py", args...)
	r := traceGated(t, tg, "tracepoint", false, testutil.Binary(t), "trace", "-p", strconv.Itoa(tg.Pid), "--children",
		"-e", "rmdir", "--sites", "8", "-d", "60s", "--format", "json", "-o", o)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	return readFamily(t, o), familyTruth(t, report), tg.Pid
}

func readFamily(t *testing.T, path string) *familyOut {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var j familyOut
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if j.Engine != "tracepoint" {
		t.Fatalf("engine %q, want tracepoint", j.Engine)
	}
	return &j
}

// TestTraceSitesNotListed: with more call paths than --sites lists (four
// processes' paths, --sites 2), the rmdir row still accounts for every
// call the target made (its own report): the listed paths, the calls at
// paths not listed and the unattributed ones add up to them, in JSON and
// in the text's lines.
func TestTraceSitesNotListed(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 300
	in := testutil.Find(t, "pyenv-3.12")
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			report, o := filepath.Join(dir, "report"), filepath.Join(dir, "t.out")
			child, _ := json.Marshal(in.Argv)
			argv := append([]string{"trace", "-e", "rmdir", "--sites", "2", "--format", format, "-o", o, "--"}, in.Argv...)
			argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "trace_family.py"),
				"--n", strconv.Itoa(n), "--out", report, "--child-argv", string(child), "--reexec")
			r := runPyobs(t, os.Environ(), argv...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			var want uint64
			for _, c := range familyTruth(t, report) {
				want += uint64(c[1])
			}
			if want != 4*n {
				t.Fatalf("the target made %d calls, want %d", want, 4*n)
			}
			if format == "json" {
				var j struct {
					Syscalls []struct {
						Name             string                   `json:"name"`
						Calls            uint64                   `json:"calls"`
						TopPaths         []struct{ Calls uint64 } `json:"top_paths"`
						PathsNotListed   uint64                   `json:"paths_not_listed"`
						Unattributed     uint64                   `json:"unattributed"`
						NotSlowOrFailing uint64                   `json:"not_slow_or_failing"`
					} `json:"syscalls"`
				}
				readJSONInto(t, o, &j)
				for _, s := range j.Syscalls {
					if s.Name != "rmdir" {
						continue
					}
					sum := s.PathsNotListed + s.Unattributed + s.NotSlowOrFailing
					for _, p := range s.TopPaths {
						sum += p.Calls
					}
					if s.Calls < want || sum != s.Calls || len(s.TopPaths) != 2 || s.PathsNotListed == 0 {
						t.Errorf("rmdir: %d calls (target: %d); %d paths listed + %d not listed + %d unattributed = %d", s.Calls, want, len(s.TopPaths), s.PathsNotListed, s.Unattributed, sum)
					}
					return
				}
				t.Fatalf("no rmdir row")
			}
			b, err := os.ReadFile(o)
			if err != nil {
				t.Fatal(err)
			}
			var calls, sum uint64
			var in, notListed bool
			for _, l := range strings.Split(string(b), "\n") {
				f := strings.Fields(l)
				switch {
				case len(f) > 7 && f[7] == "rmdir":
					calls, _ = strconv.ParseUint(f[1], 10, 64)
					in = true
				case in && len(f) > 1 && strings.HasSuffix(f[0], "×"):
					c, _ := strconv.ParseUint(strings.TrimSuffix(f[0], "×"), 10, 64)
					sum += c
					notListed = notListed || strings.Contains(l, "not listed")
				default:
					in = false
				}
			}
			if calls < want || sum != calls || !notListed {
				t.Errorf("rmdir: %d calls (target: %d), its lines sum to %d, a not-listed line %v:\n%s", calls, want, sum, notListed, b)
			}
		})
	}
}
