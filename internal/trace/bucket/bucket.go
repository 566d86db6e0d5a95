// Package bucket is the log-linear bucketing of trace's latency histograms,
// alone so that engines filling buckets themselves (the tracepoint
// engine's BPF program mirrors Of) and their tests can name it without
// importing the trace driver. Values below 2^SubBits have a bucket each;
// above that each power of two is split in 2^SubBits linear buckets, so a
// bucket's width is at most 1/2^SubBits of its value.
//
// Price: a few instructions per value. It reads nothing and sees nothing:
// pure arithmetic.
package bucket

import "math/bits"

// SubBits: each power of two is split in 2^SubBits buckets.
const SubBits = 4

const subCount = 1 << SubBits

// Of returns the bucket index of v.
func Of(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
	sub := (v >> (uint(e) - SubBits)) & (subCount - 1)
	return (e-SubBits+1)*subCount + int(sub)
}

// Bounds returns the [lo, hi] values of bucket i.
func Bounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	e := i/subCount + SubBits - 1
	sub := uint64(i % subCount)
	w := uint64(1) << (uint(e) - SubBits)
	lo = uint64(1)<<uint(e) + sub*w
	return lo, lo + w - 1
}
