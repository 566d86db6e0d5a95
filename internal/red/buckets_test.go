package red

import "testing"

func TestCumulative(t *testing.T) {
	var h Hist
	for _, v := range []uint64{500_000, 900_000, 2_000_000, 2_100_000, 40_000_000, 3_000_000_000} {
		h.Add(v)
	}
	got := h.Cumulative([]uint64{1_000_000, 10_000_000, 100_000_000})
	want := []uint64{2, 4, 5, 6}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Cumulative = %v, want %v", got, want)
		}
	}
	if e := (&Hist{}).Cumulative([]uint64{1}); e[0] != 0 || e[1] != 0 {
		t.Fatalf("empty: %v", e)
	}
}
