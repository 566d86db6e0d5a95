package trace

import (
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/trace/bucket"
)

func TestBucketRoundTrip(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 33, 100, 1000, 1 << 20, 1<<20 + 12345, 50e6, 1 << 40, math.MaxUint64} {
		i := bucket.Of(v)
		lo, hi := bucket.Bounds(i)
		if v < lo || v > hi {
			t.Fatalf("v=%d in bucket %d [%d,%d]", v, i, lo, hi)
		}
		if v >= 16 && float64(hi-lo+1) > float64(lo)/16+1 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/16 of its value", i, lo, hi)
		}
		if i < prev {
			t.Fatalf("bucket index not monotonic at %d", v)
		}
		prev = i
	}
	// every bucket's hi+1 is the next bucket's lo
	for i := 0; i < 900; i++ {
		_, hi := bucket.Bounds(i)
		lo2, _ := bucket.Bounds(i + 1)
		if hi+1 != lo2 {
			t.Fatalf("gap between bucket %d (hi %d) and %d (lo %d)", i, hi, i+1, lo2)
		}
	}
}

func TestQuantileAccuracy(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var h Hist
	var vals []uint64
	for i := 0; i < 10000; i++ {
		v := uint64(r.ExpFloat64() * 1e5)
		vals = append(vals, v)
		h.Add(v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := float64(vals[int(q*float64(len(vals)-1))])
		got := float64(h.Quantile(q))
		if math.Abs(got-want) > want/16+2 {
			t.Errorf("q%.2f: got %.0f want %.0f", q, got, want)
		}
	}
	if h.Quantile(1) != vals[len(vals)-1] || h.Quantile(0) != vals[0] {
		t.Errorf("extremes wrong")
	}
	var one Hist
	one.Add(50_000_000)
	if one.Quantile(0.5) != 50_000_000 || one.Quantile(0.99) != 50_000_000 {
		t.Errorf("single value: p50 %d", one.Quantile(0.5))
	}
	var empty Hist
	if empty.Quantile(0.5) != 0 {
		t.Errorf("empty")
	}
}

func TestAgg(t *testing.T) {
	a := New()
	s := &Site{"work", "app.py", 7}
	for i := 0; i < 10; i++ {
		a.Add(Call{Name: "newfstatat", Dur: time.Microsecond, Errno: "ENOENT", Site: s, SiteTried: true})
	}
	a.Add(Call{Name: "newfstatat", Dur: time.Microsecond, SiteTried: true}) // read failed
	a.Add(Call{Name: "newfstatat", Dur: time.Microsecond})                  // not read
	a.Add(Call{Name: "clock_nanosleep", Dur: 50 * time.Millisecond, Site: &Site{"nap", "app.py", 3}, SiteTried: true})
	st := a.Get("newfstatat")
	if st.Calls != 12 || st.Errors != 10 || st.Errnos["ENOENT"] != 10 || st.Unattributed() != 1 || st.NotWanted() != 1 || st.SiteFailed != 1 {
		t.Fatalf("stat: %+v", st)
	}
	top := st.TopSites(5)
	if len(top) != 1 || top[0].Line != 7 || top[0].Calls != 10 {
		t.Fatalf("top %+v", top)
	}
	rows := a.Rows(time.Second, 3)
	if rows[0].Name != "clock_nanosleep" || rows[0].PctWall != 5 || rows[0].P50US != 50000 {
		t.Fatalf("rows %+v", rows[0])
	}
	c, e, tot := a.Totals()
	if c != 13 || e != 10 || tot != 50*time.Millisecond+12*time.Microsecond {
		t.Fatalf("totals %d %d %v", c, e, tot)
	}
}

func TestNegativeDuration(t *testing.T) {
	a := New()
	a.Add(Call{Name: "x", Dur: -5})
	if a.Get("x").Total != 0 {
		t.Fatal("negative duration counted")
	}
}

func TestAddKernelMatchesAdd(t *testing.T) {
	vals := []time.Duration{3, 17, 900, 52e6, 49e6, 51e6, 2e3}
	a, k := New(), New()
	hist := map[int]uint64{}
	var total time.Duration
	for i, v := range vals {
		c := Call{Name: "read", Dur: v}
		if i%3 == 0 {
			c.Errno = "EAGAIN"
		}
		a.Add(c)
		hist[bucket.Of(uint64(v))]++
		total += v
	}
	k.AddKernel(Kernel{Name: "read", Calls: uint64(len(vals)), Errors: 3, Total: total, Min: 3, Max: 52e6, Hist: hist, Errnos: map[string]uint64{"EAGAIN": 3}})
	ra, rk := a.Rows(time.Second, 3), k.Rows(time.Second, 3)
	if len(ra) != 1 || len(rk) != 1 {
		t.Fatal(ra, rk)
	}
	x, y := ra[0], rk[0]
	if x.Calls != y.Calls || x.Errors != y.Errors || x.P50US != y.P50US || x.P99US != y.P99US || x.MaxUS != y.MaxUS || x.TotalS != y.TotalS || y.Errnos["EAGAIN"] != 3 {
		t.Fatalf("per call %+v\nkernel   %+v", x, y)
	}
	site := &Site{Function: "f", File: "a.py", Line: 3}
	k.AddSite("read", site, false)
	k.AddSite("read", site, false)
	k.AddSite("read", nil, false)
	k.AddSite("read", site, true)
	r := k.Rows(time.Second, 3)[0]
	if len(r.TopSites) != 1 || r.TopSites[0].Calls != 2 || r.LateReads != 1 || r.Unattributed != 2 || r.NotSlowOrFailing != uint64(len(vals))-4 {
		t.Fatalf("sites: %+v", r)
	}
}

// TestRowsSiteOnlyAccounted: a row whose calls came partly with a whole
// path and partly with their innermost frame alone: the frame-only calls
// are their own number, not "at other paths" that --sites never cut.
func TestRowsSiteOnlyAccounted(t *testing.T) {
	a := New()
	site := func(fn string) Site { return Site{Function: fn, File: "app.py", Line: 1} }
	for i, fn := range []string{"a", "b", "c"} {
		for k := 0; k <= i; k++ {
			a.Add(Call{Name: "rmdir", Errno: "ENOENT"})
			a.addPath("rmdir", fn, []Site{site(fn), site("main")}, false)
		}
	}
	for k := 0; k < 50; k++ {
		a.Add(Call{Name: "rmdir", Errno: "ENOENT"})
		s := site("leaf")
		a.AddSite("rmdir", &s, false)
	}
	rows := a.Rows(time.Second, 10)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	var listed uint64
	for _, p := range r.TopPaths {
		listed += p.Calls
	}
	if r.PathsNotListed != 0 || r.SiteOnly != 50 || listed+r.PathsNotListed+r.SiteOnly+r.Unattributed != r.Calls {
		t.Errorf("calls %d: paths listed %d, not listed %d, site only %d, unattributed %d; want 6, 0, 50, 0", r.Calls, listed, r.PathsNotListed, r.SiteOnly, r.Unattributed)
	}
}
