package red

// Cumulative counts h's values at or under each bound (nanoseconds,
// ascending), as Prometheus's `le` buckets want them; the last element is
// every value (+Inf). A bucket of h counts under the first bound its
// midpoint does not exceed: a value is off by at most half a bucket
// (QuantileError of itself).
func (h *Hist) Cumulative(bounds []uint64) []uint64 {
	out := make([]uint64, len(bounds)+1)
	j := 0
	var run uint64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := bucketRange(i)
		mid := lo + (hi-lo)/2
		for j < len(bounds) && mid > bounds[j] {
			out[j] = run
			j++
		}
		run += n
	}
	for ; j < len(bounds); j++ {
		out[j] = run
	}
	out[len(bounds)] = h.N
	return out
}
