package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// sameAddresses runs `pyobs ARGS -- python same_addresses.py MODE N`: two
// forked children, each running its own function compiled after the fork
// at the same code address as its sibling's (the stacks hash alike in the
// kernel). It returns pyobs's result and each function's pid, from the
// children's own lines, after checking that premise.
func sameAddresses(t *testing.T, mode string, n int, args ...string) (testutil.Result, map[string]int) {
	t.Helper()
	in := testutil.Find(t, "pyenv-3.12")
	argv := append(append(append([]string{}, args...), "--"), in.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "same_addresses.py"), mode, strconv.Itoa(n))
	r := testutil.Run(t, 60*time.Second, argv...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	pids, addrs := map[string]int{}, map[string]bool{}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[0], "work_") {
			pids[f[0]], _ = strconv.Atoi(f[1])
			addrs[f[2]] = true
		}
	}
	if len(pids) != 2 || len(addrs) != 1 {
		t.Fatalf("the premise: two children with their functions' code at one address; got pids %v, addresses %v\n%s", pids, addrs, r.Stdout)
	}
	return r, pids
}

// TestTraceSameAddresses: each child's failing calls are named by its own
// function, though its stack's code addresses are its sibling's (they
// were all named after whichever child the kernel sent the stack for).
func TestTraceSameAddresses(t *testing.T) {
	testutil.RequireRoot(t)
	o := filepath.Join(t.TempDir(), "t.json")
	_, _ = sameAddresses(t, "fail", 2000, "trace", "-e", "rmdir", "--format", "json", "-o", o)
	b, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	var j familyOut
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	named := map[string]uint64{}
	for _, s := range j.Syscalls {
		for _, p := range s.TopPaths {
			if len(p.Frames) > 0 {
				named[p.Frames[0].Function] += p.Calls
			}
		}
	}
	if named["work_aa"] != 2000 || named["work_bb"] != 2000 {
		t.Errorf("calls named per function %v, want 2000 each (each child made 2000)", named)
	}
}

// TestOffcpuSameAddresses: the same for where the children sleep.
func TestOffcpuSameAddresses(t *testing.T) {
	testutil.RequireRoot(t)
	o := filepath.Join(t.TempDir(), "o.folded")
	_, pids := sameAddresses(t, "sleep", 300, "offcpu", "-o", o)
	b, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	for fn, pid := range pids {
		other := "work_aa"
		if fn == other {
			other = "work_bb"
		}
		own, wrong := 0, 0
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, fmt.Sprintf("[pid %d] ", pid)) {
				continue
			}
			if strings.Contains(l, ";"+fn+" (") {
				own++
			}
			if strings.Contains(l, ";"+other+" (") {
				wrong++
			}
		}
		if own == 0 || wrong != 0 {
			t.Errorf("pid %d (%s): %d stacks in its own function, %d in its sibling's", pid, fn, own, wrong)
		}
	}
}
