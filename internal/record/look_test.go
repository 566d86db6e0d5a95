//go:build amd64

package record

import (
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
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

// The bpf engine's stack copy limit is the kernel program's.
func TestBPFMaxStackSize(t *testing.T) {
	if BPFMaxStackSize != bpfload.NatMaxBytes {
		t.Fatalf("BPFMaxStackSize %d, natcopy.h's NAT_STACK %d", BPFMaxStackSize, bpfload.NatMaxBytes)
	}
}
