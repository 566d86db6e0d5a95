package export

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/pyobs/pyobs/internal/flame"
)

func testWindow(seq uint64) *Window {
	p := flame.New(flame.Meta{Command: "record", Mode: "cpu", Unit: "samples", Pid: 42, RequestedHz: 19, PeriodNS: 52631578})
	mod := flame.Frame{Kind: flame.Python, Function: "<module>", File: "app.py", Line: 9}
	hot := flame.Frame{Kind: flame.Python, Function: "hot", File: "app.py", Line: 3}
	cold := flame.Frame{Kind: flame.Python, Function: "cold", File: "app.py", Line: 6}
	p.Add([]flame.Frame{mod, hot}, 3)
	p.Add([]flame.Frame{mod, cold}, 1)
	end := time.Unix(1_700_000_000, 0)
	return &Window{Seq: seq, Start: end.Add(-15 * time.Second), End: end, CPU: p,
		Resource: &Resource{ServiceName: "app", HostName: "h", Pid: 42, Command: "python3", RuntimeVersion: "3.12.1",
			Labels: []Label{{"env", "test"}, {"deployment.region", "eu"}}}}
}

// TestToOTLPRoundTrip: a window survives the OTLP wire format (protobuf
// there and back) with its stacks (leaf first), weights and resource.
func TestToOTLPRoundTrip(t *testing.T) {
	var m pprofile.ProtoMarshaler
	b, err := m.MarshalProfiles(ToOTLP(testWindow(1)))
	if err != nil {
		t.Fatal(err)
	}
	var u pprofile.ProtoUnmarshaler
	pd, err := u.UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := pd.SampleCount(); n != 2 {
		t.Fatalf("%d samples, want 2", n)
	}
	attrs := pd.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	if attrs["service.name"] != "app" || attrs["process.pid"] != int64(42) || attrs["env"] != "test" || attrs["process.runtime.version"] != "3.12.1" {
		t.Errorf("resource %v", attrs)
	}
	d := pd.Dictionary()
	p := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	got := map[string]int64{}
	for i := 0; i < p.Samples().Len(); i++ {
		s := p.Samples().At(i)
		li := d.StackTable().At(int(s.StackIndex())).LocationIndices()
		leaf := d.LocationTable().At(int(li.At(0))).Lines().At(0)
		root := d.LocationTable().At(int(li.At(li.Len() - 1))).Lines().At(0)
		name := d.StringTable().At(int(d.FunctionTable().At(int(leaf.FunctionIndex())).NameStrindex()))
		if r := d.StringTable().At(int(d.FunctionTable().At(int(root.FunctionIndex())).NameStrindex())); r != "<module>" {
			t.Errorf("root %q, want <module> (stacks are leaf first)", r)
		}
		got[name] += s.Values().At(0)
	}
	if got["hot"] != 3 || got["cold"] != 1 {
		t.Errorf("weights %v, want hot 3, cold 1", got)
	}
}

func TestPprofBodyLabels(t *testing.T) {
	b, err := PprofBody(testWindow(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Sample {
		if s.Label["env"][0] != "test" || s.Label["pid"][0] != "42" || s.Label["deployment_region"][0] != "eu" {
			t.Errorf("sample labels %v", s.Label)
		}
	}
	if got := AppName(testWindow(1).Resource); got != "app.cpu{pid=42,env=test,deployment_region=eu}" {
		t.Errorf("AppName = %q", got)
	}
}

type fakeSink struct {
	down atomic.Bool
	mu   sync.Mutex
	got  []uint64
}

func (f *fakeSink) Name() string { return "fake" }
func (f *fakeSink) Export(ctx context.Context, w *Window) error {
	if f.down.Load() {
		return errors.New("down")
	}
	f.mu.Lock()
	f.got = append(f.got, w.Seq)
	f.mu.Unlock()
	return nil
}

// TestQueueBoundedDrops: while the sink is down the queue holds at most
// Len windows (the oldest dropped, counted) and Put never blocks; once up,
// the newest windows arrive.
func TestQueueBoundedDrops(t *testing.T) {
	f := &fakeSink{}
	f.down.Store(true)
	q := NewQueue(f, QueueOptions{Len: 2, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAge: time.Hour})
	for i := uint64(1); i <= 10; i++ {
		t0 := time.Now()
		w := testWindow(i)
		w.End = time.Now()
		q.Put(w)
		if d := time.Since(t0); d > 50*time.Millisecond {
			t.Fatalf("Put blocked %v", d)
		}
		if s := q.Stats(); s.Queued > 2 {
			t.Fatalf("queue holds %d windows, bound 2", s.Queued)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := q.Close(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if st.Sent == 0 || st.Dropped == 0 || st.Failed == 0 || st.Sent+st.Dropped != 10 {
		t.Errorf("stats %+v (got %v): want some sent, some dropped, sent+dropped = 10", st, f.got)
	}
	if len(f.got) == 0 || f.got[len(f.got)-1] != 10 {
		t.Errorf("delivered %v: the newest window (10) should arrive", f.got)
	}
}

// TestQueueCloseDropsWhenDown: Close on a dead sink gives up at ctx's end
// and counts what it could not deliver.
func TestQueueCloseDropsWhenDown(t *testing.T) {
	f := &fakeSink{}
	f.down.Store(true)
	q := NewQueue(f, QueueOptions{Len: 3, MinBackoff: 10 * time.Millisecond})
	for i := uint64(1); i <= 3; i++ {
		q.Put(testWindow(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st := q.Close(ctx)
	if st.Sent != 0 || st.Dropped != 3 || st.Queued != 0 {
		t.Errorf("stats %+v, want 3 dropped", st)
	}
}
