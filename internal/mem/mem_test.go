package mem

import (
	"bytes"
	"strings"
	"testing"
)

func TestSelectGrowth(t *testing.T) {
	all := []Site{{Function: "a", Bytes: 9000}, {Function: "b", Bytes: 2000}, {Function: "c", Bytes: 500}, {Function: "d", Bytes: 60}}
	got, other := selectGrowth(all, 11560, 0.1, 10, 2)
	if len(got) != 2 || got[0].Function != "a" || got[1].Function != "b" || got[0].BytesPerS != 4500 {
		t.Fatalf("growth %+v", got)
	}
	if other.Bytes != 560 || other.Sites != 2 {
		t.Fatalf("other %+v", other)
	}
	// The floor: nothing below 1 KiB, whatever the share.
	got, _ = selectGrowth(all, 11560, 0, 10, 2)
	if len(got) != 2 {
		t.Fatalf("floor: %+v", got)
	}
	// Top caps the list.
	got, other = selectGrowth(all, 11560, 0, 1, 2)
	if len(got) != 1 || other.Sites != 3 {
		t.Fatalf("top: %+v %+v", got, other)
	}
	if got, _ := selectGrowth(nil, 0, 0.01, 10, 1); got == nil {
		t.Fatal("an empty growth list must encode as [], not null")
	}
}

func TestProfileRootFirst(t *testing.T) {
	r := &Result{Pid: 7, WindowS: 2, Engine: EngineTracemalloc, allGrowth: []Site{
		{Bytes: 4096, Stack: []Frame{{Function: "leak", File: "app.py", Line: 9}, {Function: "main", File: "app.py", Line: 20}, {Function: "<module>", File: "app.py", Line: 30}}},
		{Bytes: 0, Stack: []Frame{{Function: "x", File: "app.py", Line: 1}}},
	}}
	p := Profile(r)
	if p.Total() != 4096 || p.NumStacks() != 1 || p.Meta.Unit != "bytes" {
		t.Fatalf("profile: total %d stacks %d unit %q", p.Total(), p.NumStacks(), p.Meta.Unit)
	}
	key := p.FoldedKey(p.Stacks()[0])
	if key != "<module> (app.py:30);main (app.py:20);leak (app.py:9)" {
		t.Fatalf("folded %q", key)
	}
}

func TestWriteText(t *testing.T) {
	r := &Result{Pid: 7, Python: "3.14.0", Engine: EngineTracemalloc, WindowS: 2, Frames: 16,
		Growth: []Site{{Function: "leak", File: "app.py", Line: 9, Bytes: 8 << 20, Count: 128, BytesPerS: 4 << 20,
			Stack: []Frame{{Function: "leak", File: "app.py", Line: 9}, {Function: "main", File: "app.py", Line: 20}}}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+8.00 MiB", "4.00 MiB/s", "leak (app.py:9)", "called from main (app.py:20)", "it was off before and is off now"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Options{Duration: 1, Engine: "auto", Frames: 16, Top: 20, MinGrowthShare: 0.01}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Options{
		{Duration: 0, Engine: "auto", Frames: 16, Top: 20},
		{Duration: 1, Engine: "x", Frames: 16, Top: 20},
		{Duration: 1, Engine: "auto", Frames: 0, Top: 20},
		{Duration: 1, Engine: "auto", Frames: 16, Top: 0},
		{Duration: 1, Engine: "auto", Frames: 16, Top: 20, MinGrowthShare: 1},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestUnseenGrowth: the probes saw under half of what RSS grew (an LTO
// build's inlined allocator): the report says the sites may miss the
// largest grower; not when they saw most of it, nor under a MiB.
func TestUnseenGrowth(t *testing.T) {
	r := &Result{Probe: &ProbeStats{}, GrowthTotalBytes: 1500 << 10}
	r.Memory.RSSDeltaS = 11 << 20
	if u := unseenGrowth(r); !strings.Contains(u, "RSS grew 11.00 MiB while the probes saw 1.46 MiB of growth (13 %)") {
		t.Errorf("unseen: %q", u)
	}
	r.GrowthTotalBytes = 10 << 20
	if u := unseenGrowth(r); u != "" {
		t.Errorf("most seen, yet: %q", u)
	}
	r.GrowthTotalBytes, r.Memory.RSSDeltaS = 0, 512<<10
	if u := unseenGrowth(r); u != "" {
		t.Errorf("under a MiB, yet: %q", u)
	}
	r.Probe = nil
	r.Memory.RSSDeltaS = 11 << 20
	if u := unseenGrowth(r); u != "" {
		t.Errorf("tracemalloc, yet: %q", u)
	}
}
