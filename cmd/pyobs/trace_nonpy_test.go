package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestTraceNonPython: `trace -p` of a process that is not Python (a C
// program) counts its calls as for any process — getppid and failing
// rmdir, 3,000 each by the program's own loop — with both engines, and
// says why they have no Python sites, instead of refusing it.
func TestTraceNonPython(t *testing.T) {
	testutil.RequireRoot(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testutil.Skip(t, "gcc is not installed (apt-get install gcc): can't build the test's C target")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nonpy_calls")
	if b, err := exec.Command(gcc, "-O1", "-o", bin, filepath.Join(testutil.Repo(), "testdata", "targets", "nonpy_calls.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	const n = 3000
	for _, engine := range []string{"tracepoint", "ptrace"} {
		t.Run(engine, func(t *testing.T) {
			gofile, o := filepath.Join(t.TempDir(), "go"), filepath.Join(t.TempDir(), "t.json")
			tg := testutil.StartArgv(t, []string{bin, "3000", gofile}, 10*time.Second)
			cmd := exec.Command(testutil.Binary(t), "trace", "--engine", engine, "-p", strconv.Itoa(tg.Pid), "-e", "getppid,rmdir", "--format", "json", "-o", o)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; done <- nil })
			if engine == "tracepoint" {
				testutil.WaitBPFLink(t, cmd.Process.Pid, 60*time.Second)
			} else {
				for deadline := time.Now().Add(30 * time.Second); testutil.ProcStatus(tg.Pid)["TracerPid"] == "0"; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("not traced after 30 s: %s", stderr.String())
					}
				}
			}
			if err := os.WriteFile(gofile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			select { // the trace ends with the target
			case err := <-done:
				done <- err
			case <-time.After(60 * time.Second):
				t.Fatalf("trace did not end with the target: %s", stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			var out struct {
				traceOut
				Note     string `json:"engine_note"`
				Syscalls []struct {
					Name   string            `json:"name"`
					Calls  uint64            `json:"calls"`
					Errnos map[string]uint64 `json:"errnos"`
					Why    map[string]uint64 `json:"unattributed_why"`
				} `json:"syscalls"`
			}
			readJSONInto(t, o, &out)
			got := map[string]uint64{}
			for _, s := range out.Syscalls {
				got[s.Name] = s.Calls
				if s.Name == "rmdir" && (s.Errnos["ENOENT"] != n || s.Why["not Python"] != n) {
					t.Errorf("rmdir: errnos %v, no site why %v: want %d ENOENT, each unnamed as not Python", s.Errnos, s.Why, n)
				}
			}
			if got["getppid"] != n || got["rmdir"] != n {
				t.Errorf("calls %v: want %d getppid and %d rmdir (the program's own loop)", got, n, n)
			}
			if !strings.Contains(out.Note, "is not a Python process") || !strings.Contains(out.Note, "calls counted, no Python sites") {
				t.Errorf("engine note %q: want why no site", out.Note)
			}
		})
	}
}
