//go:build amd64

package record

import (
	"testing"
	"time"
)

func TestLookFor(t *testing.T) {
	for _, c := range []struct {
		freq int
		want time.Duration
	}{{1, 200 * time.Millisecond}, {99, 200 * time.Millisecond}, {4000, 200 * time.Millisecond},
		{10000, 500 * time.Millisecond}, {20000, time.Second}, {100000, time.Second}} {
		if got := lookFor(c.freq); got != c.want {
			t.Errorf("lookFor(%d) = %v, want %v", c.freq, got, c.want)
		}
	}
}
