package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestThreadNamesChurn: record --threads and offcpu --threads -- python
// thread_names.py 3, whose threads come and go a few at a time, each
// renaming itself req-<its own TID> first thing (glibc gives the next
// thread a finished one's pthread_t, so threading idents recur; TIDs do
// not), beside a CPU hog. Truth: the threads' own list of TID, name, the
// name threading gave them first, and how long they lived. No root may
// carry another thread's name (before: 464 of 879 samples did, names
// cached by ident), each thread is under one root (before: samples taken
// before its name was read were under "thread TID"), and ≥ 80 % of the
// weight of the threads that lived ≥ 50 ms is under their own name
// (before: 14 of 879 samples).
func TestThreadNamesChurn(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	for _, label := range []string{"pyenv-3.12", "pyenv-3.13"} {
		in := testutil.Find(t, label)
		for _, cmd := range []string{"record", "offcpu"} {
			t.Run(label+"/"+cmd, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "p.folded")
				args := []string{cmd, "--threads", "--format", "folded", "-o", out}
				if cmd == "record" {
					args = append(args, "-F", "299")
				}
				args = append(append(append(args, "--"), in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "thread_names.py"), "3")
				r := testutil.Run(t, 2*time.Minute, args...)
				if r.Code != 0 {
					t.Fatalf("exit %d: %s", r.Code, r.Stderr)
				}
				truth := threadTruth(t, r.Stdout)
				roots := foldedRoots(t, out)
				checkThreadRoots(t, truth, roots)
			})
		}
	}
}

// threadInfo is one thread as the target recorded it.
type threadInfo struct {
	name, first string
	lifeMS      float64
}

// threadTruth parses thread_names.py's "thread TID LIFE_MS NAME [FIRST]".
func threadTruth(t *testing.T, stdout string) map[int]threadInfo {
	t.Helper()
	truth := map[int]threadInfo{}
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.SplitN(l, " ", 5)
		if len(f) < 4 || f[0] != "thread" {
			continue
		}
		tid, err1 := strconv.Atoi(f[1])
		life, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", l)
		}
		ti := threadInfo{name: f[3], lifeMS: life}
		if len(f) == 5 {
			ti.first = f[4]
		}
		truth[tid] = ti
	}
	if len(truth) < 20 {
		t.Fatalf("the target listed %d threads:\n%s", len(truth), stdout)
	}
	return truth
}

// foldedRoots sums a folded profile's weight by its stacks' root frame.
func foldedRoots(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	roots := map[string]int64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := sc.Text()
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		w, err := strconv.ParseInt(l[sp+1:], 10, 64)
		if err != nil {
			t.Fatalf("bad folded line %q", l)
		}
		root, _, _ := strings.Cut(l[:sp], ";")
		roots[root] += w
	}
	return roots
}

var (
	namedRoot   = regexp.MustCompile(`^(.*) \((\d+)\)$`)
	unnamedRoot = regexp.MustCompile(`^thread (\d+)$`)
)

// checkThreadRoots holds each root up to the target's own list.
func checkThreadRoots(t *testing.T, truth map[int]threadInfo, roots map[string]int64) {
	t.Helper()
	owner := map[string]int{} // every name a thread had -> its TID
	for tid, ti := range truth {
		owner[ti.name] = tid
		if ti.first != "" {
			owner[ti.first] = tid
		}
	}
	perTid := map[int][]string{}
	var own, unnamed, other, long, total int64
	for root, w := range roots {
		total += w
		var tid int
		var name string
		if m := namedRoot.FindStringSubmatch(root); m != nil {
			tid, _ = strconv.Atoi(m[2])
			name = m[1]
		} else if m := unnamedRoot.FindStringSubmatch(root); m != nil {
			tid, _ = strconv.Atoi(m[1])
		} else {
			t.Errorf("root %q (weight %d) names no thread", root, w)
			continue
		}
		perTid[tid] = append(perTid[tid], root)
		if o, ok := owner[name]; ok && o != tid {
			other += w
			t.Errorf("root %q (weight %d): %q is thread %d's name", root, w, name, o)
		}
		ti, ok := truth[tid]
		if !ok || ti.lifeMS < 50 {
			continue
		}
		long += w
		switch name {
		case ti.name:
			own += w
		case "":
			unnamed += w
		}
	}
	for tid, rs := range perTid {
		if len(rs) > 1 {
			t.Errorf("thread %d is under %d roots: %q", tid, len(rs), rs)
		}
	}
	t.Logf("%d threads, %d roots, weight %d: threads that lived >= 50 ms %d, of which under their own name %d (%.1f %%), unnamed %d; under another thread's name %d",
		len(truth), len(roots), total, long, own, 100*float64(own)/float64(max(long, 1)), unnamed, other)
	if long == 0 || float64(own) < 0.8*float64(long) {
		t.Errorf("%d of %d of the long-lived threads' weight under their own name, want >= 80 %%", own, long)
	}
}
