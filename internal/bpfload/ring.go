package bpfload

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Ring reads a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF).
type Ring struct {
	name string
	rd   *ringbuf.Reader
	rec  ringbuf.Record
}

// NewRing opens the ring buffer map m; name is the map's name in the C
// source, for errors.
func NewRing(name string, m *ebpf.Map) (*Ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("can't open BPF ring buffer %s: %w", name, err)
	}
	return &Ring{name: name, rd: rd}, nil
}

// ErrWoken: Next returned before its deadline because Wake was called
// (every record there before the wake-up was returned first).
var ErrWoken = errors.New("woken before the deadline")

// Next waits until deadline for one record (a deadline already past: what
// is there now) and returns its bytes, valid until the next call; ok is
// false when the deadline came first (err nil) or Wake (err ErrWoken).
func (r *Ring) Next(deadline time.Time) (b []byte, ok bool, err error) {
	r.rd.SetDeadline(deadline)
	if err := r.rd.ReadInto(&r.rec); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, false, nil
		}
		if errors.Is(err, ringbuf.ErrFlushed) {
			return nil, false, ErrWoken
		}
		return nil, false, fmt.Errorf("can't read BPF ring buffer %s: %w", r.name, err)
	}
	return r.rec.RawSample, true, nil
}

// Wake makes a Next that waits (now, or the next one) return: what is in
// the ring, then ErrWoken. Safe from another goroutine.
func (r *Ring) Wake() { _ = r.rd.Flush() }

// Pending is how many bytes wait in the ring.
func (r *Ring) Pending() int { return r.rd.AvailableBytes() }

// Close releases the ring.
func (r *Ring) Close() error { return r.rd.Close() }
