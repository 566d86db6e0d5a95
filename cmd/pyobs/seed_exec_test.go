package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// seedTruth is seed_exec.py's own report: per role (before, after) its
// pid, CPU seconds and wall seconds.
type seedTruth map[string]struct {
	pid       int
	cpu, wall float64
}

// seedExec runs `pyobs ARGS -- python seed_exec.py MODE 1 OUT`: the
// command execs itself once (same pid, a new program). It returns the
// profile (folded) and the target's report, after checking its premise.
func seedExec(t *testing.T, mode string, args ...string) (string, seedTruth) {
	t.Helper()
	in := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	out, o := filepath.Join(dir, "truth"), filepath.Join(dir, "p.folded")
	argv := append(append([]string{}, args...), "--format", "folded", "-o", o, "--")
	argv = append(append(argv, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "seed_exec.py"), mode, "1", out)
	r := testutil.Run(t, 60*time.Second, argv...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the target's report: %v", err)
	}
	tr := seedTruth{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("report line %q", l)
		}
		e := tr[f[0]]
		e.pid, _ = strconv.Atoi(f[1])
		e.cpu, _ = strconv.ParseFloat(f[2], 64)
		e.wall, _ = strconv.ParseFloat(f[3], 64)
		tr[f[0]] = e
	}
	if len(tr) != 2 || tr["before"].pid != tr["after"].pid {
		t.Fatalf("the premise: one pid before and after its exec; report %v", tr)
	}
	p, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(p), tr
}

// inFunction sums the folded weights of the stacks through fn.
func inFunction(folded, fn string) int64 {
	var sum int64
	for _, l := range strings.Split(folded, "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || !strings.Contains(l[:i], ";"+fn+" (") && !strings.HasPrefix(l[:i], fn+" (") {
			continue
		}
		w, _ := strconv.ParseInt(l[i+1:], 10, 64)
		sum += w
	}
	return sum
}

// TestRecordSeedExecs: record -- CMD where the command execs itself: the
// new program's samples are walked with its own addresses and named
// through its own memory (read through the reader of the program before,
// with its addresses, they were all [invalid frame chain]). Both phases'
// samples are within a third of the target's own CPU time × F, with a
// CPU hog beside.
func TestRecordSeedExecs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	const hz = 199
	folded, tr := seedExec(t, "cpu", "record", "-F", strconv.Itoa(hz))
	for role, fn := range map[string]string{"before": "before_exec", "after": "after_exec"} {
		got, want := float64(inFunction(folded, fn)), tr[role].cpu*hz
		t.Logf("%s: %.0f samples in %s, its CPU time × F = %.0f", role, got, fn, want)
		if got < want*2/3 || got > want*4/3 {
			t.Errorf("%s: %.0f samples in %s, want %.0f ± a third (its own CPU time %.3fs × %d Hz)\n%s", role, got, fn, want, tr[role].cpu, hz, folded)
		}
	}
}

// TestOffcpuSeedExecs: the same for offcpu: the new program's sleeps are
// named after_exec, about as long as the target measured them (its
// addresses read as it starts: woken by its exec, looked at every 5 ms
// until its interpreter is up; at the 200 ms scan, a fifth of its waits
// were [invalid frame chain]).
func TestOffcpuSeedExecs(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	folded, tr := seedExec(t, "sleep", "offcpu")
	for role, fn := range map[string]string{"before": "before_exec", "after": "after_exec"} {
		got, want := float64(inFunction(folded, fn))/1e6, tr[role].wall-tr[role].cpu
		t.Logf("%s: %.3fs off CPU in %s, its own wall - CPU time = %.3fs", role, got, fn, want)
		if got < want*0.85 || got > want*1.1 {
			t.Errorf("%s: %.3fs off CPU in %s, want %.3fs (its own wall - CPU time), -15 %%/+10 %%\n%s", role, got, fn, want, folded)
		}
	}
}
