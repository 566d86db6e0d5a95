package pyframes

import "testing"

// TestStackReuseAllocs: a sampler's stack read (cached code objects, Reuse)
// allocates next to nothing: the hot path of `record` must not churn the heap.
func TestStackReuseAllocs(t *testing.T) {
	w, _ := standardWorld(t)
	p, err := New(w.snapshot(), 4242, w.info())
	if err != nil {
		t.Fatal(err)
	}
	refs, err := p.ThreadRefs()
	if err != nil || len(refs) == 0 {
		t.Fatal(err)
	}
	opt := Options{Retries: 1, Snapshot: true, Reuse: true}
	if _, _, _, err := p.Stack(refs[0].Addr, opt); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, _, _, err := p.Stack(refs[0].Addr, opt); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.1f allocations per stack read", allocs)
	if allocs > 0 {
		t.Errorf("%.1f allocations per cached stack read, want none", allocs)
	}
}

func BenchmarkStackReuse(b *testing.B) {
	w, _ := standardWorld(b)
	p, _ := New(w.snapshot(), 4242, w.info())
	refs, _ := p.ThreadRefs()
	opt := Options{Retries: 1, Snapshot: true, Reuse: true}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Stack(refs[0].Addr, opt)
	}
}
