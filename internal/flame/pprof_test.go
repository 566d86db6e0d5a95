package flame

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/pyobs/pyobs/internal/testutil"
)

func writeParsePprof(t *testing.T, p *Profile) (*profile.Profile, []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := WritePprof(&b, p); err != nil {
		t.Fatal(err)
	}
	if raw := b.Bytes(); len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		t.Fatalf("output is not gzip")
	}
	pp, err := profile.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("profile.Parse: %v", err)
	}
	if err := pp.CheckValid(); err != nil {
		t.Fatalf("parsed profile invalid: %v", err)
	}
	return pp, b.Bytes()
}

// The golden is the parsed profile's text form, not the gzip bytes.
func TestPprofGolden(t *testing.T) {
	for _, unit := range []string{"samples", "microseconds"} {
		t.Run(unit, func(t *testing.T) {
			pp, _ := writeParsePprof(t, fixture(unit))
			checkGolden(t, "pprof-"+unit, []byte(pp.String()))
		})
	}
}

// What the pprof says is what the profile says: sample types and values,
// period, leaf-first locations with Python file/line, thread and state
// labels, mappings for native frames with a file.
func TestPprofRoundTrip(t *testing.T) {
	p := fixture("samples")
	pp, _ := writeParsePprof(t, p)
	types := []string{}
	for _, st := range pp.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if got, want := strings.Join(types, ","), "samples/count,wall/nanoseconds"; got != want {
		t.Errorf("sample types %s, want %s", got, want)
	}
	if pp.PeriodType == nil || pp.PeriodType.Unit != "nanoseconds" || pp.Period != p.Meta.PeriodNS {
		t.Errorf("period %v %d, want nanoseconds %d", pp.PeriodType, pp.Period, p.Meta.PeriodNS)
	}
	var count, ns int64
	found := false
	for _, s := range pp.Sample {
		count += s.Value[0]
		ns += s.Value[1]
		if s.Value[1] != s.Value[0]*p.Meta.PeriodNS {
			t.Errorf("sample %v: time %d != count × period", s.Label, s.Value[1])
		}
		if len(s.Label["thread"]) != 1 {
			t.Errorf("sample without one thread label: %v", s.Label)
		}
		// The deepest recursion: leaf first, Python file and line kept.
		if len(s.Location) == 6 && s.Location[0].Line[0].Function.Name == "fib" {
			found = true
			wantLines := []int64{5, 5, 5, 3, 25, 30}
			for i, l := range s.Location {
				if l.Line[0].Line != wantLines[i] || l.Line[0].Function.Filename != "app.py" {
					t.Errorf("location %d: %s:%d, want app.py:%d", i, l.Line[0].Function.Filename, l.Line[0].Line, wantLines[i])
				}
			}
			if s.Label["thread"][0] != "MainThread" {
				t.Errorf("thread label %v", s.Label)
			}
		}
		if len(s.Label["state"]) > 0 && (s.Label["state"][0] != "sleeping" || s.Label["thread"][0] != "worker-處理") {
			t.Errorf("state sample labelled %v", s.Label)
		}
	}
	if !found {
		t.Error("no sample for the recursive stack")
	}
	if count != p.Total() {
		t.Errorf("samples %d, want %d", count, p.Total())
	}
	for _, l := range pp.Location {
		fn := l.Line[0].Function
		native := strings.HasPrefix(fn.Filename, "/usr/lib/")
		if native != (l.Mapping != nil) {
			t.Errorf("%s (%s): mapping %v", fn.Name, fn.Filename, l.Mapping)
		}
		if native && l.Address == 0 {
			t.Errorf("%s: no address", fn.Name)
		}
		if strings.HasSuffix(fn.Name, "_[k]") && l.Address < 0xffffffff80000000 {
			t.Errorf("%s: address %#x", fn.Name, l.Address)
		}
	}

	q := fixture("microseconds")
	pq, _ := writeParsePprof(t, q)
	if got := pq.SampleType[1].Type + "/" + pq.SampleType[1].Unit; got != "offcpu/microseconds" {
		t.Errorf("off-CPU sample type %s", got)
	}
	var us, n int64
	for _, s := range pq.Sample {
		n += s.Value[0]
		us += s.Value[1]
	}
	if us != q.Total() || n != 80 { // 8 stacks folded in 10 parts each
		t.Errorf("off-CPU: %d µs in %d samples, want %d in 80", us, n, q.Total())
	}
}

func TestPprofUnknownPeriod(t *testing.T) {
	p := New(Meta{Unit: "samples"})
	p.Add([]Frame{{Kind: Python, Function: "f", File: "f.py", Line: 1}}, 3)
	pp, _ := writeParsePprof(t, p)
	if len(pp.SampleType) != 1 || (pp.PeriodType != nil && pp.PeriodType.Type != "") || pp.Period != 0 || pp.Sample[0].Value[0] != 3 {
		t.Errorf("without a period: types %v period %v values %v", pp.SampleType, pp.PeriodType, pp.Sample[0].Value)
	}
	if err := WritePprof(&bytes.Buffer{}, New(Meta{Unit: "parsecs"})); err == nil {
		t.Error("unknown unit accepted")
	}
}

// TestPprofTimeType: the time a sample stands for is named by its mode —
// gil mode's is time holding the GIL, not CPU (a thread asleep in C with
// the GIL was written as cpu/nanoseconds, and diff compared it with CPU).
func TestPprofTimeType(t *testing.T) {
	for mode, want := range map[string]string{"cpu": "cpu", "": "cpu", "wall": "wall", "gil": "gil"} {
		p := New(Meta{Unit: "samples", Mode: mode, RequestedHz: 100})
		p.Add([]Frame{{Kind: Python, Function: "f", File: "f.py", Line: 1}}, 3)
		pp, _ := writeParsePprof(t, p)
		if len(pp.SampleType) != 2 || pp.SampleType[1].Type != want || pp.PeriodType.Type != want {
			t.Errorf("mode %q: types %v period type %v, want %s", mode, pp.SampleType, pp.PeriodType, want)
		}
	}
}

// go tool pprof -top reads the file and ranks the hottest leaf first.
func TestPprofGoToolTop(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "no go on PATH to run go tool pprof")
	}
	_, raw := writeParsePprof(t, fixture("samples"))
	dir := t.TempDir()
	file := filepath.Join(dir, "cpu.pb.gz")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "tool", "pprof", "-top", file)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	// The first row after the header is the top function by flat time.
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			if fields := strings.Fields(lines[i+1]); len(fields) == 0 || fields[len(fields)-1] != "fib" {
				t.Errorf("top row %q, want fib\n%s", lines[i+1], out)
			}
			if !strings.Contains(string(out), "處理.run") {
				t.Errorf("non-ASCII function missing:\n%s", out)
			}
			return
		}
	}
	t.Fatalf("no table in go tool pprof -top output:\n%s", out)
}

// mem's growth profiles weigh stacks in bytes.
func TestPprofBytes(t *testing.T) {
	p := New(Meta{Command: "mem", Mode: "growth", Unit: "bytes"})
	p.Add([]Frame{{Kind: Python, Function: "leak", File: "a.py", Line: 9}}, 4096)
	pp, _ := writeParsePprof(t, p)
	if pp.DefaultSampleType != "space" || len(pp.SampleType) != 2 || pp.SampleType[1].Unit != "bytes" || pp.Sample[0].Value[1] != 4096 {
		t.Errorf("bytes: types %v default %q values %v", pp.SampleType, pp.DefaultSampleType, pp.Sample[0].Value)
	}
}

// TestPprofProcessRoot: a set's process root becomes the sample's
// "process" label (its thread the "thread" label), and reading the pprof
// back puts both first again, in that order.
func TestPprofProcessRoot(t *testing.T) {
	p := New(Meta{Command: "record", Mode: "cpu", Unit: "samples", RequestedHz: 99})
	p.Add([]Frame{{Kind: Thread, Function: "[pid 42] python3 app.py"}, {Kind: Thread, Function: "MainThread"},
		{Kind: Python, Function: "main", File: "app.py", Line: 3}}, 5)
	var b bytes.Buffer
	if err := WritePprof(&b, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.Sample) != 1 || pp.Sample[0].Label["process"][0] != "[pid 42] python3 app.py" || pp.Sample[0].Label["thread"][0] != "MainThread" {
		t.Fatalf("labels %v", pp.Sample[0].Label)
	}
	back, _, err := ReadProfile(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	back.EachStack(func(s *Stack) { got = back.FoldedKey(s) })
	if want := "[pid 42] python3 app.py;MainThread;main (app.py:3)"; got != want {
		t.Errorf("read back %q, want %q", got, want)
	}
}

// TestPprofNamesKept: every function keeps the name pyobs gave it when go
// tool pprof reads the file. pprof's symbolizer rewrites a name it takes for
// undemangled C++ (its Name equal to its SystemName, with <> or [] in it):
// `<module>` and `<lambda>` lost everything between the brackets, to the
// empty name -top shows as <unknown>, and "[unknown] (lib+0xoff)" its
// "(lib+0xoff)". Each leaf below has its own weight, so a merge or a rename
// shows in -top's flat column.
func TestPprofNamesKept(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "no go on PATH to run go tool pprof")
	}
	p := New(Meta{Command: "record", Mode: "cpu", Unit: "samples", RequestedHz: 100}) // 10 ms a sample
	mod := Frame{Kind: Python, Function: "<module>", File: "names.py", Line: 8}
	leaves := []struct {
		f     Frame
		name  string // as pprof should show it
		count int64
	}{
		{mod, "<module>", 1},
		{Frame{Kind: Python, Function: "<lambda>", File: "names.py", Line: 2}, "<lambda>", 2},
		{Frame{Kind: Python, Function: "<genexpr>", File: "names.py", Line: 2}, "<genexpr>", 3},
		{Frame{Kind: Python, Function: "<lambda>.<locals>.<genexpr>", File: "names.py", Line: 2}, "<lambda>.<locals>.<genexpr>", 4},
		{Frame{Kind: Python, Function: "comp.<locals>.<listcomp>", File: "names.py", Line: 3}, "comp.<locals>.<listcomp>", 5},
		{Frame{Kind: Python, Function: "Grid[int].get", File: "names.py", Line: 9}, "Grid[int].get", 6},
		{Frame{Kind: Native, Function: "[unknown] (libc.so.6+0x9a1b)", File: "/usr/lib/x86_64-linux-gnu/libc.so.6", Addr: 0x7f1234569a1b}, "[unknown] (libc.so.6+0x9a1b)", 7},
		{Frame{Kind: Kernel, Function: "ksys_read", Addr: 0xffffffff81234560}, "ksys_read_[k]", 8},
	}
	for i, l := range leaves {
		stack := []Frame{{Kind: Thread, Function: "MainThread"}, l.f}
		if i > 0 {
			stack = []Frame{{Kind: Thread, Function: "MainThread"}, mod, l.f}
		}
		p.Add(stack, l.count)
	}
	pp, raw := writeParsePprof(t, p)

	// The library reads back the names written.
	names := map[string]bool{}
	for _, fn := range pp.Function {
		names[fn.Name] = true
	}
	for _, l := range leaves {
		if !names[l.name] {
			t.Errorf("no pprof Function named %q (have %v)", l.name, names)
		}
	}

	// go tool pprof shows them: its flat column is each leaf's own weight.
	dir := t.TempDir()
	file := filepath.Join(dir, "names.pb.gz")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "tool", "pprof", "-top", "-nodefraction=0", "-nodecount=100", "-sample_index=samples", file)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	flat := map[string]string{}
	table := false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "flat%") {
			table = true
			continue
		}
		// flat flat% sum% cum cum% NAME (the name may hold spaces)
		if fields := strings.Fields(line); table && len(fields) >= 6 {
			flat[strings.Join(fields[5:], " ")] = fields[0]
		}
	}
	for _, l := range leaves {
		if got, want := flat[l.name], strconv.FormatInt(l.count, 10); got != want {
			t.Errorf("go tool pprof -top: %q flat %q, want %s", l.name, got, want)
		}
	}
	if t.Failed() {
		t.Logf("go tool pprof -top:\n%s", out)
	}
}
