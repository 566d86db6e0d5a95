package main

import (
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/testutil"
)

// programLoop prints a marker line on stdout while it runs Python.
const programLoop = "import time\nfor i in range(40):\n    print('PROGRAM OUTPUT LINE', flush=True)\n    time.sleep(0.02)\n"

const programMarker = "PROGRAM OUTPUT LINE"

// TestProgramStdoutNeverInOutput: with -- CMD and pyobs's output on
// stdout, the program's stdout goes to stderr, in every
// profile format of record and in the other commands' reports; with -o
// FILE it stays on stdout.
func TestProgramStdoutNeverInOutput(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	spawn := func(args ...string) []string {
		return append(append(args, "--"), append(append([]string{}, py.Argv...), "-c", programLoop)...)
	}
	check := func(name string, r testutil.Result) {
		t.Helper()
		if r.Code != 0 {
			t.Errorf("%s: exit %d: %s", name, r.Code, r.Stderr)
			return
		}
		out := r.Stdout
		if strings.HasPrefix(out, "\x1f\x8b") { // pprof: gzip
			if zr, err := gzip.NewReader(strings.NewReader(out)); err == nil {
				b, _ := io.ReadAll(zr)
				out = string(b)
			}
		}
		if strings.Contains(out, programMarker) {
			t.Errorf("%s: the program's output is in pyobs's output", name)
		}
		if !strings.Contains(r.Stderr, programMarker) {
			t.Errorf("%s: the program's output not on stderr: %q", name, r.Stderr)
		}
	}
	for _, f := range flame.Formats() {
		if flame.Binary(f) {
			// A binary format needs -o FILE: pyobs's stdout is then free.
			continue
		}
		check("record --format "+f, testutil.Run(t, 60e9, spawn("record", "--mode", "wall", "-F", "49", "--format", f)...))
	}
	for _, c := range [][]string{
		{"stat"}, {"offcpu", "--format", "folded"}, {"trace"}, {"trace", "--engine", "ptrace"}, {"dump", "--format", "json"},
	} {
		check(strings.Join(c, " "), testutil.Run(t, 60e9, spawn(c...)...))
	}
	// -o FILE: pyobs's stdout is free, the program keeps it.
	r := testutil.Run(t, 60e9, spawn("record", "--mode", "wall", "-o", t.TempDir()+"/p.folded")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, programMarker) {
		t.Errorf("record -o FILE: exit %d, the program's output on stdout: %v", r.Code, strings.Contains(r.Stdout, programMarker))
	}
}
