package red

import (
	"math"
	"math/bits"
)

// Hist is a log-linear histogram of durations in nanoseconds: exact counts
// in buckets that are 1/subBuckets of a power of two wide, so any value
// maps to a bucket whose width is at most 1/16 of it. Histograms merge by
// adding counts. Quantiles are bucket midpoints: off by at most half a
// bucket, ±1/32 (3.1 %) of the value; the maximum is exact.
type Hist struct {
	Counts [histBuckets]uint64
	N      uint64
	Sum    uint64
	Max    uint64
	Min    uint64
}

const (
	subBits     = 4
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits + 1) * subBuckets
)

// QuantileError is the relative error bound of a quantile (half a bucket).
const QuantileError = 1.0 / (2 * subBuckets)

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
	sub := (v >> (e - subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + int(sub)
}

// bucketRange is [lo, hi) of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < subBuckets {
		return uint64(i), uint64(i) + 1
	}
	e := i/subBuckets + subBits - 1
	sub := uint64(i % subBuckets)
	w := uint64(1) << (e - subBits)
	lo = (uint64(1) << e) + sub*w
	return lo, lo + w
}

// Add records one value.
func (h *Hist) Add(v uint64) {
	h.Counts[bucketOf(v)]++
	if h.N == 0 || v < h.Min {
		h.Min = v
	}
	h.N++
	h.Sum += v
	if v > h.Max {
		h.Max = v
	}
}

// Merge adds o's counts into h.
func (h *Hist) Merge(o *Hist) {
	if o.N == 0 {
		return
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	if h.N == 0 || o.Min < h.Min {
		h.Min = o.Min
	}
	h.N += o.N
	h.Sum += o.Sum
	h.Max = max(h.Max, o.Max)
}

// Quantile returns the q-quantile (0 < q ≤ 1): the midpoint of the bucket
// holding the value of rank ceil(q·N), clamped to [Min, Max].
func (h *Hist) Quantile(q float64) uint64 {
	if h.N == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			m := lo + (hi-lo)/2
			return min(max(m, h.Min), h.Max)
		}
	}
	return h.Max
}
