package export

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/pyobs/pyobs/internal/flame"
)

// OTLPProfilesPath is where an OTLP/HTTP receiver takes the profiles
// signal at the collector release pyobs is built against (v0.165.0): the
// signal is still "development", and so is its path.
const OTLPProfilesPath = "/v1development/profiles"

// OTLP posts each window as an OTLP ExportProfilesServiceRequest
// (protobuf) to an OpenTelemetry Collector's OTLP/HTTP receiver.
type OTLP struct {
	url    string
	client *http.Client
}

// NewOTLP checks raw and returns the sink: http[s]://host:port[/path]
// for OTLP/HTTP (an empty path means OTLPProfilesPath), grpc[s]://host:port
// for OTLP/gRPC.
func NewOTLP(raw string) (Sink, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--otlp %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
	case "grpc", "grpcs":
		return newOTLPGRPC(u, raw)
	default:
		return nil, fmt.Errorf("--otlp %q: want http://HOST:4318[/path] (OTLP/HTTP) or grpc://HOST:4317 (OTLP/gRPC)", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("--otlp %q: no host", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = OTLPProfilesPath
	}
	return &OTLP{url: u.String(), client: &http.Client{}}, nil
}

// Name implements Sink.
func (o *OTLP) Name() string { return "otlp " + o.url }

// Export implements Sink.
func (o *OTLP) Export(ctx context.Context, w *Window) error {
	pd := ToOTLP(w)
	// ProfilesData and ExportProfilesServiceRequest share their fields
	// (resource_profiles = 1, dictionary = 2): the same bytes on the wire,
	// without the gRPC stack the request type's package brings along.
	var m pprofile.ProtoMarshaler
	body, err := m.MarshalProfiles(pd)
	if err != nil {
		return fmt.Errorf("can't encode window %d for %s: %w", w.Seq, o.url, err)
	}
	return post(ctx, o.client, o.url, "application/x-protobuf", body)
}

// post sends body and wants a 2xx answer.
func post(ctx context.Context, c *http.Client, u, ctype string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("can't post to %s: %w", redact(u), err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "pyobs-agent")
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL again (and its query)
		}
		return fmt.Errorf("can't post to %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("can't post to %s: %s: %s", redact(u), resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// redact drops a URL's query and user info from messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(bad url)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}

// ToOTLP converts a window into the profiles signal: one resource (the
// process), one scope (pyobs), a profile per kind (cpu samples; off-CPU
// microseconds when present). Locations are one Python frame each (the
// function's qualname and file, the executing line), leaf first in each
// stack as OTLP wants them, marked profile.frame.type=cpython (native
// frames: native, kernel frames: kernel).
func ToOTLP(w *Window) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := newDict(pd.Dictionary())
	rp := pd.ResourceProfiles().AppendEmpty()
	ra := rp.Resource().Attributes()
	r := w.Resource
	if r == nil {
		r = &Resource{}
	}
	ra.PutStr("service.name", r.ServiceName)
	ra.PutStr("host.name", r.HostName)
	ra.PutInt("process.pid", int64(r.Pid))
	ra.PutStr("process.command", r.Command)
	ra.PutStr("process.runtime.name", "CPython")
	ra.PutStr("process.runtime.version", r.RuntimeVersion)
	for _, l := range r.Labels {
		ra.PutStr(l.Key, l.Value)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("pyobs")
	for _, p := range []*flame.Profile{w.CPU, w.OffCPU} {
		if p != nil {
			d.profile(sp.Profiles().AppendEmpty(), p, w)
		}
	}
	return pd
}

// dict fills the request's shared tables; index 0 of each is the zero
// value, as the format asks.
type dict struct {
	d     pprofile.ProfilesDictionary
	strs  map[string]int32
	funcs map[[2]int32]int32
	kinds map[string]int32 // frame type -> attribute index
}

func newDict(d pprofile.ProfilesDictionary) *dict {
	x := &dict{d: d, strs: map[string]int32{}, funcs: map[[2]int32]int32{}, kinds: map[string]int32{}}
	x.str("")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	return x
}

func (x *dict) str(s string) int32 {
	if i, ok := x.strs[s]; ok {
		return i
	}
	t := x.d.StringTable()
	t.Append(s)
	i := int32(t.Len() - 1)
	x.strs[s] = i
	return i
}

func (x *dict) function(name, file string) int32 {
	k := [2]int32{x.str(name), x.str(file)}
	if i, ok := x.funcs[k]; ok {
		return i
	}
	t := x.d.FunctionTable()
	f := t.AppendEmpty()
	f.SetNameStrindex(k[0])
	f.SetSystemNameStrindex(k[0])
	f.SetFilenameStrindex(k[1])
	i := int32(t.Len() - 1)
	x.funcs[k] = i
	return i
}

func (x *dict) kind(k string) int32 {
	if i, ok := x.kinds[k]; ok {
		return i
	}
	t := x.d.AttributeTable()
	a := t.AppendEmpty()
	a.SetKeyStrindex(x.str("profile.frame.type"))
	a.Value().SetStr(k)
	i := int32(t.Len() - 1)
	x.kinds[k] = i
	return i
}

func frameType(k flame.Kind) string {
	switch k {
	case flame.Native:
		return "native"
	case flame.Kernel:
		return "kernel"
	}
	return "cpython"
}

func (x *dict) profile(pr pprofile.Profile, p *flame.Profile, w *Window) {
	m := p.Meta
	typ, unit := "samples", "count"
	ptyp, punit, period := "cpu", "nanoseconds", m.PeriodNS
	if m.Unit == "microseconds" {
		typ, unit = "offcpu", "microseconds"
		ptyp, punit, period = "offcpu", "microseconds", 1
	}
	pr.SampleType().SetTypeStrindex(x.str(typ))
	pr.SampleType().SetUnitStrindex(x.str(unit))
	pr.PeriodType().SetTypeStrindex(x.str(ptyp))
	pr.PeriodType().SetUnitStrindex(x.str(punit))
	pr.SetPeriod(period)
	start, dur := w.Start, w.End.Sub(w.Start)
	if p == w.OffCPU && !w.OffStart.IsZero() {
		start, dur = w.OffStart, time.Duration(m.DurationS*float64(time.Second))
	}
	pr.SetTime(pcommon.NewTimestampFromTime(start))
	pr.SetDurationNano(uint64(max(0, dur.Nanoseconds())))
	var id [16]byte
	_, _ = rand.Read(id[:])
	pr.SetProfileID(pprofile.ProfileID(id))
	// One location per frame of this profile (frames are interned per
	// profile; the function table is shared).
	locs := make([]int32, p.NumFrames())
	lt := x.d.LocationTable()
	for i := range locs {
		f := p.Frame(i)
		l := lt.AppendEmpty()
		if f.Kind == flame.Native || f.Kind == flame.Kernel {
			l.SetAddress(f.Addr)
		}
		line := l.Lines().AppendEmpty()
		name := f.Function
		if f.Kind == flame.Kernel {
			name += "_[k]"
		}
		line.SetFunctionIndex(x.function(name, f.File))
		line.SetLine(int64(f.Line))
		l.AttributeIndices().Append(x.kind(frameType(f.Kind)))
		locs[i] = int32(lt.Len() - 1)
	}
	st := x.d.StackTable()
	p.EachStack(func(s *flame.Stack) {
		stk := st.AppendEmpty()
		li := stk.LocationIndices()
		li.EnsureCapacity(len(s.Frames))
		for i := len(s.Frames) - 1; i >= 0; i-- {
			li.Append(locs[s.Frames[i]])
		}
		smp := pr.Samples().AppendEmpty()
		smp.SetStackIndex(int32(st.Len() - 1))
		smp.Values().Append(s.Weight)
	})
}
