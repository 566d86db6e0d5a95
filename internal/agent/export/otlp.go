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
		u = &url.URL{} // not a URL: said as a wrong scheme, below
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
	return post(ctx, o.client, o.url, "application/x-protobuf", ToOTLP(w))
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

// Field numbers of the profiles signal's messages, as of the collector
// release above (opentelemetry-proto's profiles/v1development, the field
// numbers pdata v1.71.0 decodes).
const (
	// ExportProfilesServiceRequest (the same fields as ProfilesData)
	fReqResourceProfiles, fReqDictionary = 1, 2
	// ResourceProfiles, ScopeProfiles
	fRPResource, fRPScopeProfiles = 1, 2
	fSPScope, fSPProfiles         = 1, 2
	// Resource, KeyValue, AnyValue, InstrumentationScope
	fResAttributes      = 1
	fKVKey, fKVValue    = 1, 2
	fAnyString, fAnyInt = 1, 3
	fScopeName          = 1
	// ProfilesDictionary
	fDictMapping, fDictLocation, fDictFunction, fDictLink = 1, 2, 3, 4
	fDictString, fDictAttribute, fDictStack               = 5, 6, 7
	// Profile
	fProfSampleType, fProfSamples, fProfTime, fProfDuration = 1, 2, 3, 4
	fProfPeriodType, fProfPeriod, fProfID                   = 5, 6, 7
	// ValueType, Sample, Stack
	fVTType, fVTUnit            = 1, 2
	fSampleStack, fSampleValues = 1, 4
	fStackLocations             = 1
	// Location, Line, Function, KeyValueAndUnit
	fLocAddress, fLocLines, fLocAttributes = 2, 3, 4
	fLineFunction, fLineLine               = 1, 2
	fFuncName, fFuncSystemName, fFuncFile  = 1, 2, 3
	fAttrKey, fAttrValue                   = 1, 2
)

// ToOTLP encodes a window as the profiles signal's export request
// (protobuf): one resource (the process), one scope (pyobs), a profile per
// kind (cpu samples; off-CPU microseconds when present). Locations are one
// Python frame each (the function's qualname and file, the executing
// line), leaf first in each stack as OTLP wants them, marked
// profile.frame.type=cpython (native frames: native, kernel frames:
// kernel). Written here: pdata's packages cost every pyobs command their
// initialisation at start.
func ToOTLP(w *Window) []byte {
	d := newDict()
	var res pb
	r := w.Resource
	if r == nil {
		r = &Resource{}
	}
	attr := func(k string, v func(*pb)) {
		var kv, val pb
		kv.str(fKVKey, k)
		v(&val)
		kv.msg(fKVValue, &val)
		res.msg(fResAttributes, &kv)
	}
	str := func(k, v string) { attr(k, func(m *pb) { m.str(fAnyString, v) }) }
	str("service.name", r.ServiceName)
	str("host.name", r.HostName)
	attr("process.pid", func(m *pb) { m.int(fAnyInt, int64(r.Pid)) })
	str("process.command", r.Command)
	str("process.runtime.name", "CPython")
	str("process.runtime.version", r.RuntimeVersion)
	for _, l := range r.Labels {
		str(l.Key, l.Value)
	}
	var scope, sp, rp, req pb
	scope.str(fScopeName, "pyobs")
	sp.msg(fSPScope, &scope)
	for _, p := range []*flame.Profile{w.CPU, w.OffCPU} {
		if p != nil {
			pr := d.profile(p, w)
			sp.msg(fSPProfiles, pr)
		}
	}
	rp.msg(fRPResource, &res)
	rp.msg(fRPScopeProfiles, &sp)
	req.msg(fReqResourceProfiles, &rp)
	dict := d.encode()
	req.msg(fReqDictionary, dict)
	return req.b
}

// dict fills the request's shared tables; index 0 of each is the zero
// value, as the format asks.
type dict struct {
	strs      []string
	strIdx    map[string]int32
	funcs     [][3]int32 // name, system name, file
	funcIdx   map[[2]int32]int32
	kinds     []int32 // attribute table: the frame type's value string
	kindIdx   map[string]int32
	kindKey   int32
	locations []pb
	stacks    []pb
}

func newDict() *dict {
	x := &dict{strIdx: map[string]int32{}, funcIdx: map[[2]int32]int32{}, kindIdx: map[string]int32{},
		funcs: make([][3]int32, 1), kinds: make([]int32, 1), locations: make([]pb, 1), stacks: make([]pb, 1)}
	x.str("")
	x.kindKey = x.str("profile.frame.type")
	return x
}

func (x *dict) str(s string) int32 {
	if i, ok := x.strIdx[s]; ok {
		return i
	}
	x.strs = append(x.strs, s)
	i := int32(len(x.strs) - 1)
	x.strIdx[s] = i
	return i
}

func (x *dict) function(name, file string) int32 {
	k := [2]int32{x.str(name), x.str(file)}
	if i, ok := x.funcIdx[k]; ok {
		return i
	}
	x.funcs = append(x.funcs, [3]int32{k[0], k[0], k[1]})
	i := int32(len(x.funcs) - 1)
	x.funcIdx[k] = i
	return i
}

func (x *dict) kind(k string) int32 {
	if i, ok := x.kindIdx[k]; ok {
		return i
	}
	x.kinds = append(x.kinds, x.str(k))
	i := int32(len(x.kinds) - 1)
	x.kindIdx[k] = i
	return i
}

// encode writes the dictionary message.
func (x *dict) encode() *pb {
	var m, empty pb
	m.msg(fDictMapping, &empty)
	for i := range x.locations {
		m.msg(fDictLocation, &x.locations[i])
	}
	for _, f := range x.funcs {
		var fm pb
		fm.int(fFuncName, int64(f[0]))
		fm.int(fFuncSystemName, int64(f[1]))
		fm.int(fFuncFile, int64(f[2]))
		m.msg(fDictFunction, &fm)
	}
	m.msg(fDictLink, &empty)
	for _, s := range x.strs {
		m.elem(fDictString, s)
	}
	for i, v := range x.kinds {
		var a pb
		if i > 0 {
			var val pb
			val.str(fAnyString, x.strs[v])
			a.int(fAttrKey, int64(x.kindKey))
			a.msg(fAttrValue, &val)
		}
		m.msg(fDictAttribute, &a)
	}
	for i := range x.stacks {
		m.msg(fDictStack, &x.stacks[i])
	}
	return &m
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

func (x *dict) profile(p *flame.Profile, w *Window) *pb {
	m := p.Meta
	typ, unit := "samples", "count"
	ptyp, punit, period := "cpu", "nanoseconds", m.PeriodNS
	if m.Unit == "microseconds" {
		typ, unit = "offcpu", "microseconds"
		ptyp, punit, period = "offcpu", "microseconds", 1
	}
	var pr, st, pt pb
	st.int(fVTType, int64(x.str(typ)))
	st.int(fVTUnit, int64(x.str(unit)))
	pt.int(fVTType, int64(x.str(ptyp)))
	pt.int(fVTUnit, int64(x.str(punit)))
	start, dur := w.Start, w.End.Sub(w.Start)
	if p == w.OffCPU && !w.OffStart.IsZero() {
		start, dur = w.OffStart, time.Duration(m.DurationS*float64(time.Second))
	}
	// One location per frame of this profile (frames are interned per
	// profile; the function table is shared).
	locs := make([]int64, p.NumFrames())
	for i := range locs {
		f := p.Frame(i)
		var l, line pb
		if f.Kind == flame.Native || f.Kind == flame.Kernel {
			l.uint(fLocAddress, f.Addr)
		}
		name := f.Function
		if f.Kind == flame.Kernel {
			name += "_[k]"
		}
		line.int(fLineFunction, int64(x.function(name, f.File)))
		line.int(fLineLine, int64(f.Line))
		l.msg(fLocLines, &line)
		l.packed(fLocAttributes, []int64{int64(x.kind(frameType(f.Kind)))})
		x.locations = append(x.locations, l)
		locs[i] = int64(len(x.locations) - 1)
	}
	pr.msg(fProfSampleType, &st)
	var idx []int64
	p.EachStack(func(s *flame.Stack) {
		idx = idx[:0]
		for i := len(s.Frames) - 1; i >= 0; i-- {
			idx = append(idx, locs[s.Frames[i]])
		}
		var stk, smp pb
		stk.packed(fStackLocations, idx)
		x.stacks = append(x.stacks, stk)
		smp.int(fSampleStack, int64(len(x.stacks)-1))
		smp.packed(fSampleValues, []int64{s.Weight})
		pr.msg(fProfSamples, &smp)
	})
	pr.fixed64(fProfTime, uint64(max(0, start.UnixNano())))
	pr.uint(fProfDuration, uint64(max(0, dur.Nanoseconds())))
	pr.msg(fProfPeriodType, &pt)
	pr.int(fProfPeriod, period)
	var id [16]byte
	_, _ = rand.Read(id[:])
	pr.bytes(fProfID, id[:])
	return &pr
}
