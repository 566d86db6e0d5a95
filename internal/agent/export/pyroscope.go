package export

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/pyobs/pyobs/internal/flame"
)

// Pyroscope posts each window's CPU profile to a Pyroscope server's
// ingest API: POST /ingest?name=SERVICE{k=v,…}&from=UNIX&until=UNIX&
// format=pprof&sampleRate=HZ&spyName=pyobs with the gzipped pprof as the
// body. The labels are also on every sample of the pprof.
type Pyroscope struct {
	base   *url.URL
	client *http.Client
}

// NewPyroscope checks raw (http[s]://host:port[/prefix]).
func NewPyroscope(raw string) (*Pyroscope, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--pyroscope %q: want http://HOST:PORT (the server's ingest API)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/ingest"
	u.RawQuery = ""
	return &Pyroscope{base: u, client: &http.Client{}}, nil
}

// Name implements Sink.
func (p *Pyroscope) Name() string { return "pyroscope " + p.base.String() }

// pyroKey is a label key as Pyroscope takes it: letters, digits and '_'
// ("deployment.environment" → "deployment_environment").
func pyroKey(k string) string { return strings.ReplaceAll(k, ".", "_") }

// AppName is Pyroscope's series name: SERVICE{k=v,…} with the process's
// pid and the labels (sorted by key, as given).
func AppName(r *Resource) string {
	var b strings.Builder
	b.WriteString(r.ServiceName)
	b.WriteString(".cpu{pid=")
	b.WriteString(strconv.Itoa(r.Pid))
	for _, l := range r.Labels {
		b.WriteByte(',')
		b.WriteString(pyroKey(l.Key))
		b.WriteByte('=')
		b.WriteString(l.Value)
	}
	b.WriteByte('}')
	return b.String()
}

// Export implements Sink.
func (p *Pyroscope) Export(ctx context.Context, w *Window) error {
	if w.CPU == nil || w.Resource == nil || w.CPU.NumStacks() == 0 {
		return nil // nothing sampled in this window: nothing to ingest
	}
	body, err := PprofBody(w)
	if err != nil {
		return err
	}
	u := *p.base
	q := url.Values{}
	q.Set("name", AppName(w.Resource))
	q.Set("from", strconv.FormatInt(w.Start.Unix(), 10))
	q.Set("until", strconv.FormatInt(max(w.End.Unix(), w.Start.Unix()+1), 10))
	q.Set("format", "pprof")
	q.Set("spyName", "pyobs")
	if hz := w.CPU.Meta.RequestedHz; hz > 0 {
		q.Set("sampleRate", strconv.Itoa(int(hz)))
	}
	u.RawQuery = q.Encode()
	return post(ctx, p.client, u.String(), "application/octet-stream", body)
}

// PprofBody is the window's CPU profile as gzipped pprof, each sample
// carrying the resource's labels (and pid), checked with CheckValid.
func PprofBody(w *Window) ([]byte, error) {
	var raw bytes.Buffer
	if err := flame.WritePprof(&raw, w.CPU); err != nil {
		return nil, fmt.Errorf("can't encode window %d as pprof: %w", w.Seq, err)
	}
	pp, err := profile.Parse(&raw)
	if err != nil {
		return nil, fmt.Errorf("can't re-read window %d's pprof: %w", w.Seq, err)
	}
	pp.TimeNanos = w.Start.UnixNano()
	pp.DurationNanos = max(0, w.End.Sub(w.Start).Nanoseconds())
	for _, s := range pp.Sample {
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		s.Label["pid"] = []string{strconv.Itoa(w.Resource.Pid)}
		s.Label["service_name"] = []string{w.Resource.ServiceName}
		for _, l := range w.Resource.Labels {
			s.Label[pyroKey(l.Key)] = []string{l.Value}
		}
	}
	if err := pp.CheckValid(); err != nil {
		return nil, fmt.Errorf("can't encode window %d as pprof: %w", w.Seq, err)
	}
	var out bytes.Buffer
	if err := pp.Write(&out); err != nil {
		return nil, fmt.Errorf("can't encode window %d as pprof: %w", w.Seq, err)
	}
	return out.Bytes(), nil
}
