package flame

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

var scalarArray = regexp.MustCompile(`\[\n\s*([^\[\]{}]*?)\n\s*\]`)
var scalarSep = regexp.MustCompile(`,\n\s*`)

// indentJSON makes a golden readable: indented, with arrays of scalars
// (table rows) on one line.
func indentJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("invalid JSON:\n%s", b)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", " "); err != nil {
		t.Fatal(err)
	}
	s := scalarArray.ReplaceAllStringFunc(out.String(), func(a string) string {
		inner := scalarArray.FindStringSubmatch(a)[1]
		return "[" + scalarSep.ReplaceAllString(inner, ",") + "]"
	})
	return []byte(s + "\n")
}

func TestSpeedscopeGolden(t *testing.T) {
	for _, unit := range []string{"samples", "microseconds"} {
		t.Run(unit, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteSpeedscope(&b, fixture(unit)); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "speedscope-"+unit, indentJSON(t, b.Bytes()))
		})
	}
}

// One sampled profile per thread, thread frames gone, indices in range,
// weights adding up to the profile's.
func TestSpeedscopeStructure(t *testing.T) {
	p := fixture("samples")
	var b bytes.Buffer
	if err := WriteSpeedscope(&b, p); err != nil {
		t.Fatal(err)
	}
	var f ssFile
	if err := json.Unmarshal(b.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if f.Schema != SpeedscopeSchema || len(f.Profiles) != 2 {
		t.Fatalf("schema %q, %d profiles", f.Schema, len(f.Profiles))
	}
	var total int64
	for _, sp := range f.Profiles {
		if sp.Type != "sampled" || sp.Unit != "none" || len(sp.Samples) != len(sp.Weights) {
			t.Errorf("profile %q: type %s unit %s, %d samples %d weights", sp.Name, sp.Type, sp.Unit, len(sp.Samples), len(sp.Weights))
		}
		var sum int64
		for i, s := range sp.Samples {
			sum += sp.Weights[i]
			for _, fi := range s {
				if fi < 0 || fi >= len(f.Shared.Frames) {
					t.Fatalf("frame index %d out of range", fi)
				}
				if name := f.Shared.Frames[fi].Name; name == "MainThread" || strings.HasPrefix(name, "worker") {
					t.Errorf("thread frame %q left in a stack", name)
				}
			}
		}
		if sum != sp.EndValue-sp.StartValue {
			t.Errorf("profile %q: weights %d, end %d", sp.Name, sum, sp.EndValue)
		}
		total += sum
	}
	if total != p.Total() {
		t.Errorf("total %d, want %d", total, p.Total())
	}
	if f.Profiles[0].Name != "MainThread" || f.Profiles[1].Name != "worker-處理" {
		t.Errorf("profiles %q, %q", f.Profiles[0].Name, f.Profiles[1].Name)
	}
}

func TestGeckoGolden(t *testing.T) {
	for _, unit := range []string{"samples", "microseconds"} {
		t.Run(unit, func(t *testing.T) {
			var b bytes.Buffer
			// The samples fixture's weights, read as µs blocked: one row per
			// µs keeps the golden small.
			p := fixture("samples")
			if unit == "microseconds" {
				p.Meta.Mode, p.Meta.Unit = "offcpu", unit
			}
			if err := WriteGecko(&b, p); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "gecko-"+unit, indentJSON(t, b.Bytes()))
		})
	}
}

type geckoDoc struct {
	Meta struct {
		Version    int               `json:"version"`
		Interval   float64           `json:"interval"`
		StartTime  float64           `json:"startTime"`
		Product    string            `json:"product"`
		Categories []json.RawMessage `json:"categories"`
	} `json:"meta"`
	Threads []struct {
		Name    string     `json:"name"`
		Tid     int        `json:"tid"`
		Samples geckoTable `json:"samples"`
		Frames  geckoTable `json:"frameTable"`
		Stacks  geckoTable `json:"stackTable"`
		Strings []string   `json:"stringTable"`
	} `json:"threads"`
	Libs      []any `json:"libs"`
	Processes []any `json:"processes"`
}

type geckoTable struct {
	Schema map[string]int `json:"schema"`
	Data   [][]any        `json:"data"`
}

// checkGecko checks what profiler.firefox.com's importer relies on: every
// index (stack, prefix, frame, string, category) in range, prefixes before
// the stacks that use them, times non-decreasing. It returns the rows per
// thread.
func checkGecko(t *testing.T, raw []byte) (doc geckoDoc, rows map[string]int) {
	t.Helper()
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Meta.Version != GeckoVersion || doc.Meta.Product != "pyobs" || doc.Meta.Interval <= 0 || doc.Libs == nil || doc.Processes == nil {
		t.Fatalf("meta %+v", doc.Meta)
	}
	rows = map[string]int{}
	tids := map[int]bool{}
	for _, th := range doc.Threads {
		if tids[th.Tid] {
			t.Errorf("tid %d twice", th.Tid)
		}
		tids[th.Tid] = true
		idx := func(v any, n int, what string, nullable bool) int {
			if v == nil && nullable {
				return -1
			}
			f, ok := v.(float64)
			if !ok || f != float64(int(f)) || int(f) < 0 || int(f) >= n {
				t.Fatalf("thread %q: %s %v not an index below %d", th.Name, what, v, n)
			}
			return int(f)
		}
		fs, ss, ps := th.Frames.Schema, th.Stacks.Schema, th.Samples.Schema
		if len(fs) != 8 || fs["location"] != 0 || fs["category"] != 6 || fs["subcategory"] != 7 || ss["prefix"] != 0 || ss["frame"] != 1 || ps["stack"] != 0 || ps["time"] != 1 {
			t.Fatalf("schemas %v %v %v", fs, ss, ps)
		}
		for _, f := range th.Frames.Data {
			if len(f) != 8 {
				t.Fatalf("frame row %v", f)
			}
			idx(f[0], len(th.Strings), "location", false)
			idx(f[6], len(doc.Meta.Categories), "category", false)
			if f[7] != 0.0 {
				t.Fatalf("subcategory %v", f[7])
			}
		}
		for i, s := range th.Stacks.Data {
			if p := idx(s[0], i, "prefix", true); p >= i {
				t.Fatalf("stack %d: prefix %d", i, p)
			}
			idx(s[1], len(th.Frames.Data), "frame", false)
		}
		last := -1.0
		for _, s := range th.Samples.Data {
			idx(s[0], len(th.Stacks.Data), "stack", true)
			if tm := s[1].(float64); tm < last {
				t.Fatalf("time %v after %v", tm, last)
			} else {
				last = tm
			}
		}
		rows[th.Name] = len(th.Samples.Data)
	}
	return doc, rows
}

func TestGeckoStructure(t *testing.T) {
	p := fixture("samples")
	var b bytes.Buffer
	if err := WriteGecko(&b, p); err != nil {
		t.Fatal(err)
	}
	doc, rows := checkGecko(t, b.Bytes())
	if len(doc.Threads) != 2 || rows["MainThread"] != 550 || rows["worker-處理"] != 450 {
		t.Errorf("rows per thread %v, want MainThread 550 worker-處理 450", rows)
	}
	if want := float64(p.Meta.PeriodNS) / 1e6; doc.Meta.Interval != want {
		t.Errorf("interval %v ms, want %v", doc.Meta.Interval, want)
	}
	// The stack of the deepest recursion resolves to the right frames.
	th := doc.Threads[0]
	var leafPath []string
	for _, s := range th.Samples.Data {
		var path []string
		for st := s[0]; st != nil; {
			row := th.Stacks.Data[int(st.(float64))]
			path = append([]string{th.Strings[int(th.Frames.Data[int(row[1].(float64))][0].(float64))]}, path...)
			st = row[0]
		}
		if len(path) > len(leafPath) {
			leafPath = path
		}
	}
	want := "<module> (app.py:30);main (app.py:25);_PyObject_Call (in libpython3.12.so.1.0);" +
		"[unknown] (libc.so.6+0x9a1b) (in libc.so.6);entry_SYSCALL_64 (in [kernel.kallsyms]);ksys_read (in [kernel.kallsyms])"
	if got := strings.Join(leafPath, ";"); got != want {
		t.Errorf("deepest stack\n%s\nwant\n%s", got, want)
	}
}

// Past GeckoMaxSamples a row stands for several samples; every stack
// keeps at least one row.
func TestGeckoQuantum(t *testing.T) {
	p := New(Meta{Unit: "samples", PeriodNS: 1_000_000})
	p.Add([]Frame{{Kind: Python, Function: "big", File: "a.py", Line: 1}}, 3*GeckoMaxSamples)
	p.Add([]Frame{{Kind: Python, Function: "tiny", File: "a.py", Line: 2}}, 1)
	var b bytes.Buffer
	if err := WriteGecko(&b, p); err != nil {
		t.Fatal(err)
	}
	doc, rows := checkGecko(t, b.Bytes())
	if doc.Meta.Interval != 4 || rows[doc.Threads[0].Name] != (3*GeckoMaxSamples+2)/4+1 {
		t.Errorf("interval %v, rows %v", doc.Meta.Interval, rows)
	}
}
