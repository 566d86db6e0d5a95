package perfevent

import (
	"encoding/binary"
	"fmt"
)

// Value is one event's count in one read.
type Value struct {
	ID    uint64
	Value uint64
}

// GroupRead is one read(2) of a group leader with
// PERF_FORMAT_GROUP|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING|ID:
//
//	u64 nr; u64 time_enabled; u64 time_running; { u64 value; u64 id; } [nr]
type GroupRead struct {
	Enabled, Running uint64
	Values           []Value
}

// maxGroup bounds nr: a group larger than this is not ours.
const maxGroup = 64

// DecodeGroupRead decodes a group read. On error the result is the zero value.
func DecodeGroupRead(b []byte) (GroupRead, error) {
	if len(b) < 24 {
		return GroupRead{}, fmt.Errorf("group read: %d bytes, want at least 24", len(b))
	}
	nr := binary.LittleEndian.Uint64(b)
	if nr == 0 || nr > maxGroup {
		return GroupRead{}, fmt.Errorf("group read: nr=%d out of range 1..%d", nr, maxGroup)
	}
	want := 24 + 16*int(nr)
	if len(b) < want {
		return GroupRead{}, fmt.Errorf("group read: %d bytes, want %d for %d events", len(b), want, nr)
	}
	g := GroupRead{Enabled: binary.LittleEndian.Uint64(b[8:]), Running: binary.LittleEndian.Uint64(b[16:])}
	if g.Running > g.Enabled {
		return GroupRead{}, fmt.Errorf("group read: time_running %d > time_enabled %d", g.Running, g.Enabled)
	}
	g.Values = make([]Value, nr)
	for i := range g.Values {
		o := 24 + 16*i
		g.Values[i] = Value{Value: binary.LittleEndian.Uint64(b[o:]), ID: binary.LittleEndian.Uint64(b[o+8:])}
	}
	return g, nil
}

// DecodeSingleRead decodes a read of one event with
// TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING|ID: value, enabled, running, id.
func DecodeSingleRead(b []byte) (v Value, enabled, running uint64, err error) {
	if len(b) < 32 {
		return Value{}, 0, 0, fmt.Errorf("read: %d bytes, want 32", len(b))
	}
	v = Value{Value: binary.LittleEndian.Uint64(b), ID: binary.LittleEndian.Uint64(b[24:])}
	enabled, running = binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if running > enabled {
		return Value{}, 0, 0, fmt.Errorf("read: time_running %d > time_enabled %d", running, enabled)
	}
	return v, enabled, running, nil
}

// Count is one event's total over the threads of a window.
type Count struct {
	Event     string
	Group     int // the group it was counted in; events of one group share time slices
	Supported bool
	Reason    string  // why it is not supported, or why it was not counted
	Raw       uint64  // as counted, before scaling
	Scaled    float64 // estimate of the full count: per thread raw × enabled/running, summed
	Enabled   uint64  // ns the event was enabled, summed over threads
	Running   uint64  // ns it was on the PMU, summed over threads
	Estimate  bool    // some thread's count was multiplexed (running < enabled)
	UserOnly  bool    // opened with exclude_kernel because of perf_event_paranoid (perf's ":u")
}

// RunningShare is running/enabled (1 when never multiplexed), 0 when never enabled.
func (c Count) RunningShare() float64 {
	if c.Enabled == 0 {
		return 0
	}
	return float64(c.Running) / float64(c.Enabled)
}

// Scale returns the estimate of a multiplexed count: raw × enabled/running.
// ok is false when the event was enabled but never ran (nothing to scale).
func Scale(raw, enabled, running uint64) (v float64, estimate, ok bool) {
	if running == 0 {
		return 0, false, enabled == 0
	}
	if running >= enabled {
		return float64(raw), false, true
	}
	return float64(raw) * float64(enabled) / float64(running), true, true
}

// Triple is one event's raw value and times on one thread, since it was opened.
type Triple struct{ Raw, Enabled, Running uint64 }

// EventInfo is an event as opened.
type EventInfo struct {
	Name      string
	Group     int
	Supported bool
	Reason    string
	UserOnly  bool
}

// Reading is one read of every thread's counters (cumulative since open).
type Reading struct {
	Events  []EventInfo
	Threads map[int][]Triple // tid → per event (index into Events)
}

// Window subtracts two readings of the same Set thread by thread (a thread
// missing from a counts from zero: it was created, or first read, in
// between), scales each thread's delta by its own enabled/running, and sums.
func Window(a, b Reading) []Count {
	out := make([]Count, len(b.Events))
	for i, e := range b.Events {
		out[i] = Count{Event: e.Name, Group: e.Group, Supported: e.Supported, Reason: e.Reason, UserOnly: e.UserOnly}
	}
	ran := make([]bool, len(out))
	for tid, tb := range b.Threads {
		ta := a.Threads[tid]
		for i := range out {
			if !out[i].Supported || i >= len(tb) {
				continue
			}
			d := tb[i]
			if i < len(ta) {
				d = Triple{sub(tb[i].Raw, ta[i].Raw), sub(tb[i].Enabled, ta[i].Enabled), sub(tb[i].Running, ta[i].Running)}
			}
			if d.Running > d.Enabled {
				d.Running = d.Enabled
			}
			out[i].Raw += d.Raw
			out[i].Enabled += d.Enabled
			out[i].Running += d.Running
			if v, est, ok := Scale(d.Raw, d.Enabled, d.Running); ok {
				out[i].Scaled += v
				out[i].Estimate = out[i].Estimate || est
				if d.Running > 0 {
					ran[i] = true
				}
			}
		}
	}
	for i := range out {
		if out[i].Supported && out[i].Enabled > 0 && !ran[i] {
			out[i].Reason = "not counted: enabled but never on the PMU in this window"
		}
	}
	return out
}

// Totals is Window from nothing: the counts since the counters were opened.
func Totals(b Reading) []Count { return Window(Reading{}, b) }

func sub(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}
