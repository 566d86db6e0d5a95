package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// Waits for SIGUSR1, then makes OK successful os.stat calls of a file that
// exists (fast: no site is read for them) and FAIL failing ones, mixed,
// and prints its own counts.
const statMixScript = `import os, signal, sys
ok_n, fail_n = int(sys.argv[1]), int(sys.argv[2])
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("READY", flush=True)
signal.sigwait({signal.SIGUSR1})
here, missing = sys.executable, "/nonexistent/pyobs-stat-mix-%d" % os.getpid()
ok = fail = 0
for i in range(max(ok_n, fail_n)):
    if i < ok_n:
        os.stat(here)
        ok += 1
    if i < fail_n:
        try:
            os.stat(missing)
        except FileNotFoundError:
            fail += 1
print("DONE ok=%d fail=%d" % (ok, fail), flush=True)
`

// TestTraceUnattributedOnlyWanted: "unattributed" counts the calls that
// were to be named (slow or failing) and got no site — not the fast
// successful ones, which get no site by design and are counted apart
// (not_slow_or_failing). Ground truth: the target's own counts.
func TestTraceUnattributedOnlyWanted(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	const okN, failN = 3000, 400
	script := filepath.Join(t.TempDir(), "statmix.py")
	if err := os.WriteFile(script, []byte(statMixScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{"tracepoint", "ptrace"} {
		t.Run(engine, func(t *testing.T) {
			argv := append(append([]string{}, py.Argv...), script, strconv.Itoa(okN), strconv.Itoa(failN))
			tg := testutil.StartArgv(t, argv, 30*time.Second)
			dir := t.TempDir()
			o := filepath.Join(dir, "t.json")
			r := traceGated(t, tg, engine, false, testutil.Binary(t), "trace", "--engine", engine, "-e", "newfstatat", "-p", strconv.Itoa(tg.Pid), "-d", "60s", "--format", "json", "-o", o)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			var ok, fail int
			select {
			case l := <-tg.Lines:
				if _, err := fmt.Sscanf(l, "DONE ok=%d fail=%d", &ok, &fail); err != nil {
					t.Fatalf("target said %q", l)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the target did not print its counts")
			}
			var j struct {
				Syscalls []struct {
					Name             string                   `json:"name"`
					Calls            uint64                   `json:"calls"`
					Errors           uint64                   `json:"errors"`
					TopSites         []struct{ Calls uint64 } `json:"top_sites"`
					SitesNotListed   uint64                   `json:"sites_not_listed"`
					Unattributed     uint64                   `json:"unattributed"`
					NotSlowOrFailing uint64                   `json:"not_slow_or_failing"`
				} `json:"syscalls"`
			}
			readJSONInto(t, o, &j)
			found := false
			for _, s := range j.Syscalls {
				if s.Name != "newfstatat" {
					continue
				}
				found = true
				named := s.SitesNotListed
				for _, x := range s.TopSites {
					named += x.Calls
				}
				t.Logf("target: ok %d, fail %d; trace: calls %d, errors %d, named %d, unattributed %d, not slow or failing %d",
					ok, fail, s.Calls, s.Errors, named, s.Unattributed, s.NotSlowOrFailing)
				if s.Calls != uint64(ok+fail) || s.Errors != uint64(fail) {
					t.Errorf("calls %d errors %d; the target made %d, %d failing", s.Calls, s.Errors, ok+fail, fail)
				}
				// Every call is on one line of the account.
				if named+s.Unattributed+s.NotSlowOrFailing != s.Calls {
					t.Errorf("named %d + unattributed %d + not slow or failing %d != calls %d", named, s.Unattributed, s.NotSlowOrFailing, s.Calls)
				}
				// The failing calls are named (a few slow successful
				// ones may be too, under load); none of the fast
				// successful ones is unattributed.
				if named < uint64(fail) || s.Unattributed > uint64(fail)/100 {
					t.Errorf("named %d of %d failing calls, unattributed %d", named, fail, s.Unattributed)
				}
				if s.NotSlowOrFailing > uint64(ok) || s.NotSlowOrFailing < uint64(ok)*9/10 {
					t.Errorf("not slow or failing %d; the target made %d fast successful calls", s.NotSlowOrFailing, ok)
				}
			}
			if !found {
				t.Fatal("no newfstatat row")
			}
			// The text says the same.
			tg2 := testutil.StartArgv(t, argv, 30*time.Second)
			txt := traceGated(t, tg2, engine, false, testutil.Binary(t), "trace", "--engine", engine, "-e", "newfstatat", "-p", strconv.Itoa(tg2.Pid), "-d", "60s")
			if n := unattributedInText(txt.Stdout); n > fail/100 || !strings.Contains(txt.Stdout, "neither slow nor failing") {
				t.Errorf("text: %d× unattributed (want at most %d), and a line for the calls neither slow nor failing:\n%s", n, fail/100, txt.Stdout)
			}
		})
	}
}

var unattributedLine = regexp.MustCompile(`(\d+)× unattributed`)

func unattributedInText(s string) int {
	n := 0
	for _, m := range unattributedLine.FindAllStringSubmatch(s, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
