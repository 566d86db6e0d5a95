package export

import (
	"sort"
	"strconv"
	"sync"

	"github.com/pyobs/pyobs/internal/red"
)

// RedBounds are the duration histogram's upper bounds, in seconds: 1 ms
// to 10 s, about three per decade.
var RedBounds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// maxRoutes bounds the series per port: routes beyond it are counted
// under route="[other]".
const maxRoutes = 200

type redKey struct {
	port  int
	route string
}

// redSeries is one (port, route)'s totals since the agent started.
type redSeries struct {
	requests, errors, client4xx uint64
	buckets                     []uint64 // cumulative per RedBounds, then +Inf
	sumS                        float64
}

// redCollector keeps red's counters and duration histograms, summed over
// the windows red reported (each report is one interval's).
type redCollector struct {
	mu       sync.Mutex
	series   map[redKey]*redSeries
	routes   map[int]int // distinct routes per port
	boundsNs []uint64
}

func newRedCollector() *redCollector {
	c := &redCollector{series: map[redKey]*redSeries{}, routes: map[int]int{}}
	for _, b := range RedBounds {
		c.boundsNs = append(c.boundsNs, uint64(b*1e9))
	}
	return c
}

var redHelp = []struct{ name, help string }{
	{"pyobs_red_requests_total", "red: requests answered or aborted, per listening port and route (method + path)"},
	{"pyobs_red_errors_total", "red: requests that failed (5xx, or aborted by the server)"},
	{"pyobs_red_client_errors_total", "red: requests answered with a 4xx status"},
}

const redDuration = "pyobs_red_request_duration_seconds"

// write renders the series, by port then route.
func (c *redCollector) write(t *promText) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.series) == 0 {
		return
	}
	keys := make([]redKey, 0, len(c.series))
	for k := range c.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].port != keys[j].port {
			return keys[i].port < keys[j].port
		}
		return keys[i].route < keys[j].route
	})
	labels := func(k redKey) []promLabel {
		return []promLabel{{"port", strconv.Itoa(k.port)}, {"route", k.route}}
	}
	for i, h := range redHelp {
		t.family(h.name, h.help, "counter")
		for _, k := range keys {
			s := c.series[k]
			t.sample(h.name, float64([...]uint64{s.requests, s.errors, s.client4xx}[i]), labels(k)...)
		}
	}
	hist := false
	for _, s := range c.series {
		hist = hist || s.buckets != nil
	}
	if !hist {
		return
	}
	t.family(redDuration, "red: request duration, from the request's first byte read to the response's last byte written", "histogram")
	for _, k := range keys {
		if s := c.series[k]; s.buckets != nil {
			t.histogram(redDuration, RedBounds, s.buckets, s.sumS, labels(k)...)
		}
	}
}

func (c *redCollector) get(port int, route string) *redSeries {
	k := redKey{port, route}
	if s, ok := c.series[k]; ok {
		return s
	}
	if c.routes[port] >= maxRoutes {
		k.route = "[other]"
		if s, ok := c.series[k]; ok {
			return s
		}
	}
	c.routes[port]++
	s := &redSeries{}
	c.series[k] = s
	return s
}

func (c *redCollector) addDur(s *redSeries, d *red.Durations) {
	if d == nil || d.Hist == nil {
		return
	}
	if s.buckets == nil {
		s.buckets = make([]uint64, len(RedBounds)+1)
	}
	for i, n := range d.Hist.Cumulative(c.boundsNs) {
		s.buckets[i] += n
	}
	s.sumS += float64(d.Hist.Sum) / 1e9
}

// observe folds one interval's report.
func (c *redCollector) observe(r *red.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range r.Ports {
		var req, errs, cli uint64
		for _, rt := range p.Routes {
			s := c.get(p.Port, rt.Route)
			s.requests += rt.Requests
			s.errors += rt.Errors
			s.client4xx += rt.Client4xx
			c.addDur(s, rt.Duration)
			req, errs, cli = req+rt.Requests, errs+rt.Errors, cli+rt.Client4xx
		}
		// Requests no route names (another protocol, an unparsed head).
		if p.Requests > req || p.Errors > errs {
			s := c.get(p.Port, "[none]")
			s.requests += p.Requests - min(req, p.Requests)
			s.errors += p.Errors - min(errs, p.Errors)
			s.client4xx += p.Client4xx - min(cli, p.Client4xx)
			if len(p.Routes) == 0 {
				c.addDur(s, p.Duration)
			}
		}
	}
}
