package red

import (
	"math"
	"math/rand"
	"sort"
	"testing"
)

// TestHistBuckets: every value falls in its bucket, and buckets are at
// most 1/16 of their lower bound wide.
func TestHistBuckets(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		v := uint64(rng.Int63()) >> uint(rng.Intn(63))
		lo, hi := bucketRange(bucketOf(v))
		if v < lo || v >= hi {
			t.Fatalf("%d in bucket [%d,%d)", v, lo, hi)
		}
		if lo >= subBuckets && float64(hi-lo)/float64(lo) > 1.0/subBuckets+1e-12 {
			t.Fatalf("bucket [%d,%d) too wide", lo, hi)
		}
	}
	if bucketOf(math.MaxUint64) >= histBuckets {
		t.Fatal("max value out of range")
	}
}

// TestHistQuantiles: quantiles agree with the exact ones within the stated
// error, and merging two halves gives the whole.
func TestHistQuantiles(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var all, a, b Hist
	var vals []uint64
	for i := 0; i < 20000; i++ {
		v := uint64(rng.ExpFloat64()*2e6) + 1000
		if i%100 == 0 {
			v = 200e6 + uint64(rng.Intn(5e6))
		}
		vals = append(vals, v)
		all.Add(v)
		if i%2 == 0 {
			a.Add(v)
		} else {
			b.Add(v)
		}
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := all.Quantile(q)
		if math.Abs(float64(got)-float64(exact)) > QuantileError*float64(exact)*1.0001 {
			t.Errorf("q%.3f: %d, exact %d", q, got, exact)
		}
	}
	a.Merge(&b)
	if a != all {
		t.Error("merged halves differ from the whole")
	}
	if all.Max != vals[len(vals)-1] || all.Quantile(1) != all.Max {
		t.Errorf("max %d, want %d", all.Max, vals[len(vals)-1])
	}
}
