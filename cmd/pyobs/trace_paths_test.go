package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// pathsOut is the part of `trace --format json` the whole-path tests read.
type pathsOut struct {
	PythonWalk *struct {
		On        bool   `json:"on"`
		Why       string `json:"why"`
		Walked    uint64 `json:"walked"`
		Truncated uint64 `json:"truncated"`
		Faulted   uint64 `json:"faulted"`
		Distinct  uint64 `json:"distinct_stacks"`
		RingLost  uint64 `json:"ring_lost"`
		Unnamed   uint64 `json:"calls_unnamed"`
	} `json:"python_walk"`
	BPF *struct {
		Stats    string  `json:"bpf_stats"`
		ExitS    float64 `json:"sys_exit_s"`
		ExitRuns uint64  `json:"sys_exit_runs"`
	} `json:"bpf"`
	SiteError string `json:"site_read_error"`
	Syscalls  []struct {
		Name     string `json:"name"`
		Calls    uint64 `json:"calls"`
		TopSites []struct {
			Function string `json:"function"`
			Line     int    `json:"line"`
			Calls    uint64 `json:"calls"`
		} `json:"top_sites"`
		TopPaths []struct {
			Calls     uint64 `json:"calls"`
			Truncated bool   `json:"truncated"`
			Frames    []struct {
				Function string `json:"function"`
				File     string `json:"file"`
				Line     int    `json:"line"`
			} `json:"frames"`
		} `json:"top_paths"`
	} `json:"syscalls"`
}

// statRow is the row of os.stat's syscall (newfstatat, or statx).
func statRow(t *testing.T, out *pathsOut) int {
	t.Helper()
	for i, s := range out.Syscalls {
		if s.Name == "newfstatat" || s.Name == "statx" {
			return i
		}
	}
	t.Fatalf("no stat row in %+v", out.Syscalls)
	return -1
}

// runPaths runs trace_paths.py (na calls a → io, nb calls b → mid → io,
// each io one failing os.stat) under the tracepoint engine and returns
// the JSON, the footer and the target's own counts (from its file).
func runPaths(t *testing.T, py testutil.Interp, na, nb int, extra ...string) (*pathsOut, string, map[string]float64) {
	t.Helper()
	return runPathsWith(t, "tracepoint", py, na, nb, extra...)
}

// runPathsWith is runPaths under the given engine.
func runPathsWith(t *testing.T, engine string, py testutil.Interp, na, nb int, extra ...string) (*pathsOut, string, map[string]float64) {
	t.Helper()
	dir := t.TempDir()
	counts := filepath.Join(dir, "counts")
	// It lingers after its calls: the names of the code objects its calls
	// ran are read from its memory, which its exit frees (a trace of a
	// program that exits at once says so: site_read_error "freed"). Under
	// load the reader, every 20 ms, came after the exit (CI).
	tg := testutil.Start(t, py, "trace_paths.py", "--a", strconv.Itoa(na), "--b", strconv.Itoa(nb), "--out", counts, "--linger", "0.5", "--wait-usr1")
	o := filepath.Join(dir, "t.json")
	argv := append([]string{testutil.Binary(t), "trace", "--engine", engine, "-p", strconv.Itoa(tg.Pid), "-d", "30s", "--sites", "5", "--format", "json", "-o", o}, extra...)
	r := traceGated(t, tg, engine, false, argv...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	var out pathsOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	cb, err := os.ReadFile(counts)
	if err != nil {
		t.Fatalf("the target wrote no counts: %v", err)
	}
	truth := map[string]float64{}
	for _, kv := range strings.Fields(string(cb)) {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseFloat(v, 64)
		truth[k] = n
	}
	return &out, r.Stderr, truth
}

// pathsWant is trace_paths.py's io line and its two paths as checkPaths
// compares them ("a" and "b": the script's frames, root first).
func pathsWant(t *testing.T) (io int, want map[string]string) {
	t.Helper()
	const script = "trace_paths.py"
	io, aL, midL, bL := markerLine(t, script, "PATHS_IO_LINE"), markerLine(t, script, "PATHS_A_LINE"), markerLine(t, script, "PATHS_MID_LINE"), markerLine(t, script, "PATHS_B_LINE")
	runA, runB, mainL := markerLine(t, script, "PATHS_RUN_A_LINE"), markerLine(t, script, "PATHS_RUN_B_LINE"), markerLine(t, script, "PATHS_MAIN_LINE")
	return io, map[string]string{
		"a": fmt.Sprintf("<module>:%d run:%d a:%d io:%d", mainL, runA, aL, io),
		"b": fmt.Sprintf("<module>:%d run:%d b:%d mid:%d io:%d", mainL, runB, bL, midL, io),
	}
}

// TestTraceBPFWholePaths: failing calls from two call paths through the
// same innermost function (a → io, b → mid → io): --sites ranks the two
// whole paths, each from <module> down to io's os.stat, with the target's
// own counts (within 1 %), and the innermost-site view agrees (io's line,
// both paths' calls).
func TestTraceBPFWholePaths(t *testing.T) {
	testutil.RequireRoot(t)
	io, want := pathsWant(t)
	for _, label := range []string{"pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			out, footer, truth := runPaths(t, py, 3000, 2000)
			if truth["a"] != 3000 || truth["b"] != 2000 {
				t.Fatalf("target counts %v", truth)
			}
			checkPaths(t, out, truth, want, io)
			if w := out.PythonWalk; w == nil || !w.On || w.Walked < 5000 || w.Distinct < 2 || w.RingLost != 0 || w.Unnamed != 0 {
				t.Errorf("python_walk %+v; want on, ≥ 5000 walked, ≥ 2 distinct, nothing lost", w)
			}
			if b := out.BPF; b == nil || b.ExitRuns < 5000 || b.ExitS <= 0 {
				t.Errorf("bpf %+v; want sys_exit's runs (≥ the target's 5000 calls) and run time", b)
			}
			if !strings.Contains(footer, "Python stacks walked whole in the kernel at the call") {
				t.Errorf("footer without the walk's account: %s", footer)
			}
		})
	}
}

// TestTracePtraceWholePaths: the ptrace engine reads a failing call's
// whole stack at its exit stop, the thread stopped: the same two paths,
// with the target's own counts, exactly (every call stops).
func TestTracePtraceWholePaths(t *testing.T) {
	testutil.RequireRoot(t)
	io, want := pathsWant(t)
	for _, label := range []string{"pyenv-3.10", "pyenv-3.13"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			out, footer, truth := runPathsWith(t, "ptrace", py, 300, 200)
			if truth["a"] != 300 || truth["b"] != 200 {
				t.Fatalf("target counts %v", truth)
			}
			if !strings.Contains(footer, "whole Python stacks read at the exit stop") {
				t.Errorf("footer: %s", footer)
			}
			checkPaths(t, out, truth, want, io)
		})
	}
}

// checkPaths: the stat row's paths are want's (script frames, root
// first), each with the target's own count (within 1 %), whole (ending at
// <module>), and their leaves are top_sites' io line.
func checkPaths(t *testing.T, out *pathsOut, truth map[string]float64, want map[string]string, io int) {
	t.Helper()
	const script = "trace_paths.py"
	row := out.Syscalls[statRow(t, out)]
	got := map[string]uint64{}
	for _, p := range row.TopPaths {
		var labels []string
		for i := len(p.Frames) - 1; i >= 0; i-- {
			f := p.Frames[i]
			if !strings.HasSuffix(f.File, script) {
				continue // the stdlib's frames would be a bug here: caught below by the count
			}
			labels = append(labels, fmt.Sprintf("%s:%d", f.Function, f.Line))
		}
		if n := len(p.Frames); n == 0 || p.Frames[n-1].Function != "<module>" || p.Truncated {
			t.Errorf("path without its outermost frame: %+v", p)
		}
		got[strings.Join(labels, " ")] += p.Calls
	}
	for k, path := range want {
		n, tr := float64(got[path]), truth[k]
		if n < 0.99*tr || n > 1.01*tr {
			t.Errorf("path %s: %v calls, the target counted %v (paths %v; site error %q)", path, n, tr, got, out.SiteError)
		}
	}
	var atIO uint64
	for _, s := range row.TopSites {
		if s.Function == "io" && s.Line == io {
			atIO += s.Calls
		}
	}
	if atIO != got[want["a"]]+got[want["b"]] {
		t.Errorf("top_sites %+v: io:%d has %d calls, the paths through it %d", row.TopSites, io, atIO, got[want["a"]]+got[want["b"]])
	}
}

// TestTraceBPFOneFrameFallback: with --kernel-walk=false the kernel reads
// the innermost frame alone (the fallback for a kernel that refuses the
// walk): the same sites, no paths, and the footer and JSON say why.
func TestTraceBPFOneFrameFallback(t *testing.T) {
	testutil.RequireRoot(t)
	io := markerLine(t, "trace_paths.py", "PATHS_IO_LINE")
	py := testutil.Find(t, "pyenv-3.12")
	out, footer, truth := runPaths(t, py, 300, 200, "--kernel-walk=false")
	if w := out.PythonWalk; w == nil || w.On || w.Why != "--kernel-walk=false" {
		t.Errorf("python_walk %+v; want off, why --kernel-walk=false", w)
	}
	if !strings.Contains(footer, "innermost Python frame only (no stack walk: --kernel-walk=false)") {
		t.Errorf("footer: %s", footer)
	}
	row := out.Syscalls[statRow(t, out)]
	if len(row.TopPaths) != 0 || len(row.TopSites) != 1 || row.TopSites[0].Function != "io" || row.TopSites[0].Line != io ||
		float64(row.TopSites[0].Calls) != truth["a"]+truth["b"] {
		t.Errorf("sites %+v, paths %+v; want every one of the %v calls at io:%d and no paths; footer: %s", row.TopSites, row.TopPaths, truth, io, footer)
	}
}
