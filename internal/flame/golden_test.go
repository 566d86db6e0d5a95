package flame

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/flame/golden")

var goldenDir = filepath.Join("..", "..", "testdata", "flame", "golden")

// checkGolden compares got with testdata/flame/golden/<name>.golden (named
// after the renderer and its options) and shows a diff; -update rewrites it.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name+".golden")
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file missing (go test ./internal/flame -update writes it): %v", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the golden file (- want, + got; go test ./internal/flame -update accepts it):\n%s",
			path, lineDiff(string(want), string(got)))
	}
}

// lineDiff is a small unified-style diff (LCS over lines, 3 lines of
// context); for huge inputs it shows the first differing line only.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x)*len(y) > 4_000_000 {
		for i := 0; i < len(x) && i < len(y); i++ {
			if x[i] != y[i] {
				return fmt.Sprintf("line %d:\n- %s\n+ %s\n", i+1, x[i], y[i])
			}
		}
		return fmt.Sprintf("lengths differ: %d vs %d lines\n", len(x), len(y))
	}
	// lcs[i][j]: LCS length of x[i:], y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		c    byte
		line string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', x[i]})
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, op{'+', y[j]})
			j++
		default:
			ops = append(ops, op{'-', x[i]})
			i++
		}
	}
	var out strings.Builder
	last := -1
	for k, o := range ops {
		near := false
		for d := max(0, k-3); d <= min(len(ops)-1, k+3); d++ {
			if ops[d].c != ' ' {
				near = true
				break
			}
		}
		if !near {
			continue
		}
		if last >= 0 && k != last+1 {
			out.WriteString("...\n")
		}
		line := o.line
		if len(line) > 300 {
			line = line[:300] + "…"
		}
		fmt.Fprintf(&out, "%c %s\n", o.c, line)
		last = k
	}
	return out.String()
}

// fixture is the profile every golden test renders: two threads (and a
// stack with only its thread frame), recursion, Python, native and kernel
// frames, a State frame, non-ASCII names and files.
func fixture(unit string) *Profile {
	scale := int64(1)
	if unit == "microseconds" {
		scale = 1000
	}
	p := New(Meta{Command: "record", Mode: "wall", Unit: unit, Pid: 4242, Python: "3.12.7",
		DurationS: 10, RequestedHz: 99, AchievedHz: 97.5, Samples: 1000, Lost: 3, Torn: 7, Failed: 1,
		ObserverCPUS: 0.125, PeriodNS: 10_101_010})
	mainT := Frame{Kind: Thread, Function: "MainThread"}
	worker := Frame{Kind: Thread, Function: "worker-處理"}
	module := Frame{Kind: Python, Function: "<module>", File: "app.py", Line: 30}
	mainF := Frame{Kind: Python, Function: "main", File: "app.py", Line: 25}
	fib := func(line int) Frame { return Frame{Kind: Python, Function: "fib", File: "app.py", Line: line} }
	run := Frame{Kind: Python, Function: "處理.run", File: "/srv/模組/工作.py", Line: 12}
	uni := Frame{Kind: Python, Function: "Ünïcode.méthod", File: "ünïcode.py", Line: 7}
	call := Frame{Kind: Native, Function: "_PyObject_Call", File: "/usr/lib/libpython3.12.so.1.0", Addr: 0x7f0000001234}
	unknown := Frame{Kind: Native, Function: "[unknown] (libc.so.6+0x9a1b)", File: "/usr/lib/x86_64-linux-gnu/libc.so.6", Addr: 0x7f1234569a1b}
	entry := Frame{Kind: Kernel, Function: "entry_SYSCALL_64", Addr: 0xffffffff81000080}
	read := Frame{Kind: Kernel, Function: "ksys_read", Addr: 0xffffffff81234560}
	sleeping := Frame{Kind: State, Function: "sleeping"}
	add := func(weight int64, frames ...Frame) {
		// Fold in ten parts, so Count (10) differs from Weight.
		for i := int64(0); i < 10; i++ {
			p.Add(frames, weight*scale/10)
		}
	}
	add(300, mainT, module, mainF, fib(3), fib(5), fib(5), fib(5))
	add(120, mainT, module, mainF, fib(3), fib(5))
	add(80, mainT, module, mainF, uni)
	add(50, mainT, module, mainF, call, unknown, entry, read)
	add(200, worker, run)
	add(150, worker, run, sleeping)
	add(90, worker, run, call)
	add(10, worker)
	return p
}
