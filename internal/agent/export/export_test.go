package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestToOTLPRoundTrip: a window written by ToOTLP is read back by pdata's
// protobuf decoder (the collector's own) with its stacks (leaf first),
// weights, frame types, times, period and resource; the off-CPU profile
// shares the dictionary.
func TestToOTLPRoundTrip(t *testing.T) {
	w := testWindow(1)
	off := flame.New(flame.Meta{Command: "offcpu", Unit: "microseconds", DurationS: 30})
	off.Add([]flame.Frame{{Kind: flame.Python, Function: "<module>", File: "app.py", Line: 9},
		{Kind: flame.Native, Function: "pthread_cond_wait", Addr: 0x7f0012345678},
		{Kind: flame.Kernel, Function: "futex_wait"}}, 2500)
	w.OffCPU, w.OffStart = off, w.End.Add(-30*time.Second)
	var u pprofile.ProtoUnmarshaler
	pd, err := u.UnmarshalProfiles(ToOTLP(w))
	if err != nil {
		t.Fatal(err)
	}
	if n := pd.SampleCount(); n != 3 {
		t.Fatalf("%d samples, want 3", n)
	}
	attrs := pd.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	if attrs["service.name"] != "app" || attrs["process.pid"] != int64(42) || attrs["env"] != "test" ||
		attrs["deployment.region"] != "eu" || attrs["process.runtime.version"] != "3.12.1" || attrs["process.runtime.name"] != "CPython" {
		t.Errorf("resource %v", attrs)
	}
	sp := pd.ResourceProfiles().At(0).ScopeProfiles().At(0)
	if sp.Scope().Name() != "pyobs" || sp.Profiles().Len() != 2 {
		t.Fatalf("scope %q with %d profiles, want pyobs with 2", sp.Scope().Name(), sp.Profiles().Len())
	}
	d := pd.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	if d.StringTable().At(0) != "" || d.LocationTable().At(0).Lines().Len() != 0 || d.FunctionTable().At(0).NameStrindex() != 0 ||
		d.MappingTable().Len() != 1 || d.LinkTable().Len() != 1 || d.AttributeTable().At(0).KeyStrindex() != 0 {
		t.Errorf("index 0 of the tables is not the zero value")
	}
	type leaf struct {
		name, kind string
		line       int64
		addr       uint64
	}
	frames := func(p pprofile.Profile) (got map[string]int64, stacks [][]leaf) {
		got = map[string]int64{}
		for i := 0; i < p.Samples().Len(); i++ {
			s := p.Samples().At(i)
			li := d.StackTable().At(int(s.StackIndex())).LocationIndices()
			var st []leaf
			for j := 0; j < li.Len(); j++ {
				loc := d.LocationTable().At(int(li.At(j)))
				ln := loc.Lines().At(0)
				f := d.FunctionTable().At(int(ln.FunctionIndex()))
				a := d.AttributeTable().At(int(loc.AttributeIndices().At(0)))
				if str(a.KeyStrindex()) != "profile.frame.type" || str(f.SystemNameStrindex()) != str(f.NameStrindex()) {
					t.Errorf("location %d: attribute %q, system name %q", j, str(a.KeyStrindex()), str(f.SystemNameStrindex()))
				}
				st = append(st, leaf{str(f.NameStrindex()), a.Value().Str(), ln.Line(), loc.Address()})
			}
			got[st[0].name] += s.Values().At(0)
			stacks = append(stacks, st)
		}
		return got, stacks
	}
	cpu := sp.Profiles().At(0)
	got, stacks := frames(cpu)
	if got["hot"] != 3 || got["cold"] != 1 {
		t.Errorf("weights %v, want hot 3, cold 1", got)
	}
	for _, st := range stacks {
		if r := st[len(st)-1]; r.name != "<module>" || r.line != 9 || r.kind != "cpython" {
			t.Errorf("root %+v, want <module> line 9 cpython (stacks are leaf first)", r)
		}
	}
	if str(cpu.SampleType().TypeStrindex()) != "samples" || str(cpu.PeriodType().UnitStrindex()) != "nanoseconds" ||
		cpu.Period() != 52631578 || !cpu.Time().AsTime().Equal(w.Start) || cpu.DurationNano() != uint64(15*time.Second) || cpu.ProfileID().IsEmpty() {
		t.Errorf("cpu profile: type %q, period unit %q, period %d, time %v, duration %d, id %v", str(cpu.SampleType().TypeStrindex()),
			str(cpu.PeriodType().UnitStrindex()), cpu.Period(), cpu.Time().AsTime(), cpu.DurationNano(), cpu.ProfileID())
	}
	oc := sp.Profiles().At(1)
	got, stacks = frames(oc)
	want := []leaf{{"futex_wait_[k]", "kernel", 0, 0}, {"pthread_cond_wait", "native", 0, 0x7f0012345678}, {"<module>", "cpython", 9, 0}}
	if got["futex_wait_[k]"] != 2500 || len(stacks) != 1 || fmt.Sprint(stacks[0]) != fmt.Sprint(want) {
		t.Errorf("off-CPU weights %v stacks %+v, want 2500 on %+v", got, stacks, want)
	}
	if str(oc.SampleType().UnitStrindex()) != "microseconds" || oc.Period() != 1 || !oc.Time().AsTime().Equal(w.OffStart) || oc.DurationNano() != uint64(30*time.Second) {
		t.Errorf("off-CPU profile: unit %q period %d time %v duration %d", str(oc.SampleType().UnitStrindex()), oc.Period(), oc.Time().AsTime(), oc.DurationNano())
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
