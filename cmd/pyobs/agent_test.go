package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/pyobs/pyobs/internal/testutil"
)

// The agent's tests run real servers on loopback: an OpenTelemetry
// Collector built from tools/otelcol, Debian's prometheus, and a test-side
// Pyroscope ingest receiver (no Pyroscope server is available here).

// freePort returns a loopback port nobody listens on (now).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitPort(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s after %v", addr, within)
}

// startCmd starts a server process, killed (its group) at the end of the test.
func startCmd(t *testing.T, log string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("can't start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s's log:\n%s", name, clip(string(b), 3000))
		}
	})
	return cmd
}

func clip(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var (
	otelcolOnce sync.Once
	otelcolPath string
	otelcolErr  error
)

// otelcolBinary builds tools/otelcol once per go.sum and caches it under
// /var/cache/pyobs-tools (the build takes minutes on a cold module cache;
// .ci/run does it first).
func otelcolBinary(t *testing.T) string {
	t.Helper()
	otelcolOnce.Do(func() {
		dir := filepath.Join(testutil.Repo(), "tools", "otelcol")
		sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
		if err != nil {
			otelcolErr = err
			return
		}
		mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
		src, _ := os.ReadFile(filepath.Join(dir, "main.go"))
		h := sha256.Sum256(append(append(sum, mod...), src...))
		cache := "/var/cache/pyobs-tools"
		otelcolPath = filepath.Join(cache, "otelcol-"+hex.EncodeToString(h[:8]))
		if _, err := os.Stat(otelcolPath); err == nil {
			return
		}
		if err := os.MkdirAll(cache, 0o755); err != nil {
			otelcolErr = err
			return
		}
		t0 := time.Now()
		tmp := otelcolPath + ".tmp" + strconv.Itoa(os.Getpid())
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			otelcolErr = fmt.Errorf("can't build the test collector in %s: %v\n%s", dir, err, clip(string(out), 3000))
			return
		}
		if err := os.Rename(tmp, otelcolPath); err != nil {
			otelcolErr = err
			return
		}
		fmt.Fprintf(os.Stderr, "built the test collector %s in %.1fs\n", otelcolPath, time.Since(t0).Seconds())
	})
	if otelcolErr != nil {
		t.Fatal(otelcolErr)
	}
	return otelcolPath
}

// TestAgentCollectorBuild builds (or finds) the test collector: .ci/run
// runs it first so the build's minutes are not any test's.
func TestAgentCollectorBuild(t *testing.T) {
	t0 := time.Now()
	p := otelcolBinary(t)
	t.Logf("collector %s ready in %.1fs", p, time.Since(t0).Seconds())
}

// startCollector runs the collector with the OTLP receiver (proto: http
// or grpc) on a free port and the file exporter writing JSON lines to out.
func startCollector(t *testing.T, proto string) (endpoint, out string) {
	t.Helper()
	bin := otelcolBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	out = filepath.Join(dir, "profiles.json")
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      %s:
        endpoint: 127.0.0.1:%d
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file]
`, proto, port, out)
	conf := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startCmd(t, filepath.Join(dir, "otelcol.log"), bin, "--config", conf, "--feature-gates=service.profilesSupport")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitPort(t, addr, 20*time.Second)
	return proto + "://" + addr, out
}

// readCollected decodes the file exporter's JSON lines.
func readCollected(t *testing.T, path string) []pprofile.Profiles {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []pprofile.Profiles
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var u pprofile.JSONUnmarshaler
		pd, err := u.UnmarshalProfiles(sc.Bytes())
		if err != nil {
			t.Fatalf("the collector wrote a line that is not OTLP profiles JSON: %v\n%s", err, clip(sc.Text(), 500))
		}
		out = append(out, pd)
	}
	return out
}

// otlpFunctionShares counts, over every cpu profile, the samples whose
// stack holds each function (inclusive) and the total.
func otlpFunctionShares(pds []pprofile.Profiles) (incl map[string]int64, total int64) {
	incl = map[string]int64{}
	for _, pd := range pds {
		d := pd.Dictionary()
		strs := d.StringTable()
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			sps := pd.ResourceProfiles().At(i).ScopeProfiles()
			for j := 0; j < sps.Len(); j++ {
				ps := sps.At(j).Profiles()
				for k := 0; k < ps.Len(); k++ {
					p := ps.At(k)
					if strs.At(int(p.SampleType().TypeStrindex())) != "samples" {
						continue
					}
					for s := 0; s < p.Samples().Len(); s++ {
						smp := p.Samples().At(s)
						var w int64
						for v := 0; v < smp.Values().Len(); v++ {
							w += smp.Values().At(v)
						}
						total += w
						seen := map[string]bool{}
						li := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
						for l := 0; l < li.Len(); l++ {
							loc := d.LocationTable().At(int(li.At(l)))
							for x := 0; x < loc.Lines().Len(); x++ {
								fn := d.FunctionTable().At(int(loc.Lines().At(x).FunctionIndex()))
								name := strs.At(int(fn.NameStrindex()))
								if !seen[name] {
									seen[name] = true
									incl[name] += w
								}
							}
						}
					}
				}
			}
		}
	}
	return incl, total
}

// TestAgentOTLPCollector: a real collector receives the agent's windows,
// over OTLP/HTTP and over OTLP/gRPC; what it wrote decodes as OTLP
// profiles where heavy() — 2 of every 3 units of the target's CPU — has
// 2/3 of the samples (±5 points), under the resource attributes of the
// process and the --label.
func TestAgentOTLPCollector(t *testing.T) {
	testutil.RequireRoot(t)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) { testAgentOTLP(t, proto) })
	}
}

func testAgentOTLP(t *testing.T, proto string) {
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	endpoint, out := startCollector(t, proto)
	tg := testutil.Start(t, in, "cpu_split.py", "10", "1000000")
	args := []string{"agent", "-p", strconv.Itoa(tg.Pid), "--window", "2s", "-d", "9s", "-F", "199",
		"--otlp", endpoint, "--label", "env=test"}
	if proto == "grpc" {
		// And an off-CPU profile per 4 s span (two spans, each over two windows).
		args = append(args, "--offcpu", "--offcpu-window", "4s")
	}
	r := testutil.Run(t, 60*time.Second, args...)
	if r.Code != 0 {
		t.Fatalf("pyobs agent: exit %d\n%s", r.Code, r.Stderr)
	}
	var pds []pprofile.Profiles
	deadline := time.Now().Add(5 * time.Second)
	for {
		pds = readCollected(t, out)
		if len(pds) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(pds) < 3 {
		t.Fatalf("the collector wrote %d requests, want ≥ 3 of 9 s at 2 s windows\nagent: %s", len(pds), r.Stderr)
	}
	host, _ := os.Hostname()
	for i, pd := range pds {
		if pd.ResourceProfiles().Len() != 1 {
			t.Fatalf("request %d: %d resources, want 1", i, pd.ResourceProfiles().Len())
		}
		attrs := pd.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
		want := map[string]any{"service.name": "cpu_split", "host.name": host, "process.pid": int64(tg.Pid),
			"process.runtime.version": in.Version, "env": "test"}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("request %d: resource %s = %v, want %v (all: %v)", i, k, attrs[k], v, attrs)
			}
		}
		if cmd, _ := attrs["process.command"].(string); !strings.Contains(filepath.Base(cmd), "python") {
			t.Errorf("request %d: process.command %q is not the python binary", i, cmd)
		}
	}
	incl, total := otlpFunctionShares(pds)
	if total < 200 {
		t.Fatalf("%d samples over the run, too few to judge (agent: %s)", total, r.Stderr)
	}
	share := 100 * float64(incl["heavy"]) / float64(total)
	light := 100 * float64(incl["light"]) / float64(total)
	t.Logf("%d windows, %d samples: heavy %.1f %%, light %.1f %%", len(pds), total, share, light)
	if share < 66.7-5 || share > 66.7+5 {
		t.Errorf("heavy() has %.1f %% of the samples, want 66.7 ± 5 (light %.1f %%; functions: %v)", share, light, incl)
	}
	if proto == "grpc" {
		checkOTLPOffCPU(t, pds)
	}
}

// checkOTLPOffCPU: the off-CPU profiles span about 4 s each (not a
// window's 2 s) and rest(), where cpu_split sleeps, holds most of their
// blocked time.
func checkOTLPOffCPU(t *testing.T, pds []pprofile.Profiles) {
	t.Helper()
	var spans []float64
	var total, rest int64
	for _, pd := range pds {
		d := pd.Dictionary()
		strs := d.StringTable()
		ps := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
		for k := 0; k < ps.Len(); k++ {
			p := ps.At(k)
			if strs.At(int(p.SampleType().TypeStrindex())) != "offcpu" {
				continue
			}
			spans = append(spans, float64(p.DurationNano())/1e9)
			for s := 0; s < p.Samples().Len(); s++ {
				smp := p.Samples().At(s)
				var w int64
				for v := 0; v < smp.Values().Len(); v++ {
					w += smp.Values().At(v)
				}
				li := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
				var names []string
				for l := 0; l < li.Len(); l++ {
					loc := d.LocationTable().At(int(li.At(l)))
					if loc.Lines().Len() > 0 {
						names = append(names, strs.At(int(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex())))
					}
				}
				// Blocked time only: waiting for a CPU is the machine's
				// load, not where the target waits.
				if slices.Contains(names, "[run-queue]") {
					continue
				}
				total += w
				if slices.Contains(names, "rest") {
					rest += w
				}
			}
		}
	}
	t.Logf("off-CPU profiles: spans %v s, %d µs, rest() %d µs", spans, total, rest)
	if len(spans) < 2 {
		t.Fatalf("%d off-CPU profiles, want 2 spans of 4 s in 9 s", len(spans))
	}
	if spans[0] < 3.5 || spans[0] > 5 {
		t.Errorf("the first off-CPU profile spans %.2f s, want ~4 s (--offcpu-window)", spans[0])
	}
	if total == 0 || float64(rest) < 0.8*float64(total) {
		t.Errorf("rest() has %d of %d µs blocked, want ≥ 80 %%", rest, total)
	}
}

// promQuery asks Prometheus's HTTP API for an instant vector.
func promQuery(t *testing.T, base, q string) []float64 {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %q: %v (status %q)", q, err, body.Status)
	}
	var out []float64
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err == nil {
			out = append(out, v)
		}
	}
	return out
}

// TestAgentPrometheus: Debian's prometheus scrapes --metrics every 500 ms;
// PromQL over its HTTP API gives stat's on-CPU share of a target spinning
// one thread (its own process_time says how much CPU it got), the on-cpu
// verdict and the agent's own cost.
func TestAgentPrometheus(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	mport := freePort(t)
	base := startPrometheus(t, mport)

	tg := testutil.Start(t, in, "cpu_burn.py")
	time.Sleep(100 * time.Millisecond)
	m0, c0 := latestTruth(t, tg)
	agentCmd := exec.Command(testutil.Binary(t), "agent", "-p", strconv.Itoa(tg.Pid), "--window", "2s", "-d", "30s",
		"--metrics", fmt.Sprintf("127.0.0.1:%d", mport), "--label", "env=test")
	var stderr bytes.Buffer
	agentCmd.Stderr = &stderr
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = agentCmd.Process.Kill(); _, _ = agentCmd.Process.Wait() }()
	// Three windows in, ask while the agent still serves.
	var util, last []float64
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if w := promQuery(t, base, `pyobs_windows_total{job="pyobs",service="cpu_burn",env="test"}`); len(w) == 1 && w[0] >= 3 {
			// stat's CPU seconds over the windows' wall time: the on-CPU
			// share of the windows so far, in cores.
			util = promQuery(t, base, `sum(pyobs_target_cpu_seconds_total{job="pyobs",service="cpu_burn"}) / sum(pyobs_window_seconds_total{job="pyobs",service="cpu_burn"})`)
			last = promQuery(t, base, `pyobs_target_cpu_utilization_cores{job="pyobs",service="cpu_burn"}`)
			break
		}
	}
	m1, c1 := latestTruth(t, tg)
	if len(util) != 1 {
		t.Fatalf("prometheus has no utilization from the agent: %v\nagent: %s", util, stderr.String())
	}
	truth := (c1 - c0) / (m1 - m0)
	t.Logf("PromQL on-CPU share %.3f cores (last window %v); the target's own process_time says %.3f", util[0], last, truth)
	if util[0] < truth-0.15 || util[0] > truth+0.15 {
		t.Errorf("on-CPU share %.3f cores from Prometheus, the target measured %.3f (±0.15)", util[0], truth)
	}
	if v := promQuery(t, base, `max_over_time(pyobs_verdict{verdict="on-cpu",service="cpu_burn"}[30s])`); len(v) != 1 || v[0] != 1 {
		t.Errorf("verdict on-cpu: %v, want 1", v)
	}
	if v := promQuery(t, base, `pyobs_samples_total{service="cpu_burn"}`); len(v) != 1 || v[0] < 19 {
		t.Errorf("pyobs_samples_total %v, want ≥ 19 (one second at 19 Hz)", v)
	}
	if v := promQuery(t, base, `pyobs_observer_cpu_seconds_total{service="cpu_burn"}`); len(v) != 1 || v[0] <= 0 {
		t.Errorf("pyobs_observer_cpu_seconds_total %v, want > 0", v)
	}
	// /metrics serves metrics and nothing else.
	for _, path := range []string{"/", "/debug/pprof/", "/metrics/../x"} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", mport, path))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET %s on --metrics: %d, want 404", path, resp.StatusCode)
			}
		}
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), "text/plain", strings.NewReader("x"))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
		}
	}
}

// ingest is a test-side Pyroscope /ingest receiver.
type ingest struct {
	mu   sync.Mutex
	reqs []ingestReq
	srv  *http.Server
	ln   net.Listener
	errs []string
}

type ingestReq struct {
	at    time.Time
	query url.Values
	prof  *profile.Profile
}

func (g *ingest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bad := func(format string, a ...any) {
		g.mu.Lock()
		g.errs = append(g.errs, fmt.Sprintf(format, a...))
		g.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/ingest" {
		bad("%s %s, want POST /ingest", r.Method, r.URL.Path)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		bad("body: %v", err)
		return
	}
	p, err := profile.Parse(bytes.NewReader(body))
	if err != nil {
		bad("body is not a pprof: %v", err)
		return
	}
	if err := p.CheckValid(); err != nil {
		bad("invalid pprof: %v", err)
		return
	}
	g.mu.Lock()
	g.reqs = append(g.reqs, ingestReq{at: time.Now(), query: r.URL.Query(), prof: p})
	g.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (g *ingest) requests() []ingestReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]ingestReq(nil), g.reqs...)
}

// serve starts the receiver on addr.
func (g *ingest) serve(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g.ln = ln
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	t.Cleanup(func() { _ = g.srv.Close() })
}

var appName = regexp.MustCompile(`^([A-Za-z0-9_.-]+)\.cpu\{(.*)\}$`)

// checkIngest checks one request's shape: name SERVICE.cpu{pid=…,labels},
// from < until (unix seconds), format=pprof, and the labels on every sample.
func checkIngest(t *testing.T, r ingestReq, service string, pid int, labels map[string]string) {
	t.Helper()
	q := r.query
	m := appName.FindStringSubmatch(q.Get("name"))
	if m == nil || m[1] != service {
		t.Errorf("name %q, want %s.cpu{…}", q.Get("name"), service)
		return
	}
	got := map[string]string{}
	for _, kv := range strings.Split(m[2], ",") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	if got["pid"] != strconv.Itoa(pid) {
		t.Errorf("name %q: pid %q, want %d", q.Get("name"), got["pid"], pid)
	}
	for k, v := range labels {
		if got[k] != v {
			t.Errorf("name %q: %s=%q, want %q", q.Get("name"), k, got[k], v)
		}
	}
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	until, err2 := strconv.ParseInt(q.Get("until"), 10, 64)
	if err1 != nil || err2 != nil || from >= until || until > time.Now().Unix()+1 || from < time.Now().Unix()-120 {
		t.Errorf("from %q until %q: want unix seconds, from < until, recent", q.Get("from"), q.Get("until"))
	}
	if q.Get("format") != "pprof" {
		t.Errorf("format %q, want pprof", q.Get("format"))
	}
	if len(r.prof.Sample) == 0 {
		t.Errorf("window from %d: a pprof without samples (an empty window is not sent)", from)
	}
	for _, s := range r.prof.Sample {
		for k, v := range labels {
			if len(s.Label[k]) != 1 || s.Label[k][0] != v {
				t.Errorf("a sample's labels %v, want %s=%s", s.Label, k, v)
				return
			}
		}
	}
}

// TestAgentPyroscope: each window reaches the ingest API as a valid pprof
// with the service name, pid and labels, in the request and on the samples.
func TestAgentPyroscope(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	var g ingest
	g.serve(t, "127.0.0.1:0")
	tg := testutil.Start(t, in, "cpu_burn.py")
	r := testutil.Run(t, 60*time.Second, "agent", "-p", strconv.Itoa(tg.Pid), "--window", "1s", "-d", "4500ms", "-F", "99",
		"--pyroscope", "http://"+g.ln.Addr().String(), "--label", "env=test", "--label", "team=obs", "--service", "burner")
	if r.Code != 0 {
		t.Fatalf("pyobs agent: exit %d\n%s", r.Code, r.Stderr)
	}
	reqs := g.requests()
	for _, e := range g.errs {
		t.Errorf("receiver: %s", e)
	}
	if len(reqs) < 2 {
		t.Fatalf("%d ingest requests, want ≥ 2 of 4.5 s at 1 s windows (each window's engine start takes its time)\nagent: %s", len(reqs), r.Stderr)
	}
	for _, q := range reqs {
		checkIngest(t, q, "burner", tg.Pid, map[string]string{"env": "test", "team": "obs"})
	}
}

// scrape reads one metric's value from the agent's /metrics ("" sink
// label: any; the sum over matching series).
func scrape(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// TestAgentSinkOutage: the Pyroscope sink is down (nothing listens) for
// the first 6 s with 500 ms windows and a 2-window queue: the agent keeps
// sampling, counts the windows it drops and exports that count, its queue
// and memory stay bounded; once the sink is up, later windows arrive.
func TestAgentSinkOutage(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	sinkAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	maddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tg := testutil.Start(t, in, "cpu_burn.py")
	agentCmd := exec.Command(testutil.Binary(t), "agent", "-p", strconv.Itoa(tg.Pid), "--window", "500ms", "-d", "10s", "-F", "99",
		"--queue", "2", "--engine", "perf", "--pyroscope", "http://"+sinkAddr, "--metrics", maddr, "--label", "env=test")
	var stderr bytes.Buffer
	agentCmd.Stderr = &stderr
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- agentCmd.Wait() }()
	defer func() { _ = agentCmd.Process.Kill(); <-done }()
	waitPort(t, maddr, 10*time.Second)
	outage := time.Now().Add(6 * time.Second)
	var samples0, rss0, rssMax, queueMax float64
	for time.Now().Before(outage) {
		time.Sleep(250 * time.Millisecond)
		if q, ok := scrape(t, maddr, "pyobs_export_queue_windows"); ok {
			queueMax = max(queueMax, q)
		}
		rss, _ := scrape(t, maddr, "process_resident_memory_bytes")
		if samples0 == 0 {
			samples0, _ = scrape(t, maddr, "pyobs_samples_total")
			rss0 = rss
		}
		rssMax = max(rssMax, rss)
	}
	samples1, _ := scrape(t, maddr, "pyobs_samples_total")
	dropped, ok := scrape(t, maddr, "pyobs_export_dropped_windows_total")
	failed, _ := scrape(t, maddr, "pyobs_export_failures_total")
	t.Logf("outage: samples %v → %v, dropped %v, failed attempts %v, queue ≤ %v, RSS %.1f → ≤ %.1f MiB",
		samples0, samples1, dropped, failed, queueMax, rss0/(1<<20), rssMax/(1<<20))
	if samples1 <= samples0 {
		t.Errorf("sampling stalled while the sink was down: samples %v → %v", samples0, samples1)
	}
	if !ok || dropped < 1 {
		t.Errorf("pyobs_export_dropped_windows_total = %v (exported: %v), want ≥ 1 after 6 s down at 2-window queue", dropped, ok)
	}
	if failed < 1 {
		t.Errorf("pyobs_export_failures_total = %v, want ≥ 1", failed)
	}
	if queueMax > 2 {
		t.Errorf("queue held %v windows, bound 2", queueMax)
	}
	if rssMax > rss0*1.5+8<<20 {
		t.Errorf("RSS grew from %.1f to %.1f MiB during the outage", rss0/(1<<20), rssMax/(1<<20))
	}
	// Up: later windows arrive (within the backoff's cap).
	upAt := time.Now()
	var g ingest
	g.serve(t, sinkAddr)
	select {
	case err := <-done:
		done <- err
	case <-time.After(20 * time.Second):
		t.Fatalf("the agent did not end\n%s", stderr.String())
	}
	reqs := g.requests()
	later := 0
	for _, r := range reqs {
		if from, _ := strconv.ParseInt(r.query.Get("from"), 10, 64); from >= upAt.Unix()-1 {
			later++
		}
		checkIngest(t, r, "cpu_burn", tg.Pid, map[string]string{"env": "test"})
	}
	t.Logf("after the sink came up: %d windows received, %d of them begun after; agent: %s", len(reqs), later, strings.TrimSpace(stderr.String()))
	if later < 2 {
		t.Errorf("%d windows begun after the sink came up reached it, want ≥ 2", later)
	}
	if !strings.Contains(stderr.String(), "dropped") {
		t.Errorf("the agent's summary does not account drops:\n%s", stderr.String())
	}
}

// TestAgentSignalFlush: SIGTERM in the middle of a 30 s window ends the
// agent promptly with status 0 and still exports that window, cut short.
func TestAgentSignalFlush(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	testutil.Binary(t)
	var g ingest
	g.serve(t, "127.0.0.1:0")
	maddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tg := testutil.Start(t, in, "cpu_burn.py")
	cmd := exec.Command(testutil.Binary(t), "agent", "-p", strconv.Itoa(tg.Pid), "--window", "30s", "-F", "99",
		"--pyroscope", "http://"+g.ln.Addr().String(), "--metrics", maddr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	waitPort(t, maddr, 10*time.Second)
	time.Sleep(2 * time.Second)
	sent := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("agent after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent did not end within 10 s of SIGTERM\n%s", stderr.String())
	}
	took := time.Since(sent)
	reqs := g.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d windows exported, want the one cut by SIGTERM\n%s", len(reqs), stderr.String())
	}
	from, _ := strconv.ParseInt(reqs[0].query.Get("from"), 10, 64)
	until, _ := strconv.ParseInt(reqs[0].query.Get("until"), 10, 64)
	t.Logf("ended %.2fs after SIGTERM; the window covered %d s", took.Seconds(), until-from)
	if until-from > 10 {
		t.Errorf("the last window covers %d s: it was not cut at the signal", until-from)
	}
	checkIngest(t, reqs[0], "cpu_burn", tg.Pid, nil)
}

// TestAgentSoak (make soak; PYOBS_AGENT_SOAK=DURATION shortens its hour):
// the agent at 19 Hz with --offcpu, 15 s windows, a Pyroscope sink and
// /metrics, on a busy target whose stacks never stop changing. After the
// first twelfth of the run (5 min of the hour) its RSS does not grow: the
// peak of the last third is within 10 % of the peak of the first third
// (inside a window the RSS rises and falls with the engines' rings and
// maps, so single readings are not compared). Its CPU must be ≤ 1 % of one
// core. Prints a line for BENCHMARKS.md.
func TestAgentSoak(t *testing.T) {
	if os.Getenv("PYOBS_SOAK") == "" {
		t.Skip("soak test: run with PYOBS_SOAK=1 (make soak)")
	}
	dur := time.Hour
	if s := os.Getenv("PYOBS_AGENT_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("PYOBS_AGENT_SOAK=%q: %v", s, err)
		}
		dur = d
	}
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	var g ingest
	g.serve(t, "127.0.0.1:0")
	tg := testutil.Start(t, in, "busy.py")
	cmd := exec.Command(testutil.Binary(t), "agent", "-p", strconv.Itoa(tg.Pid), "--offcpu", "-d", dur.String(),
		"--pyroscope", "http://"+g.ln.Addr().String(), "--metrics", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	var rss []float64
	warm := dur / 12
	start := time.Now()
	tick := time.NewTicker(max(time.Second, dur/360))
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-tick.C:
			if time.Since(start) < warm {
				continue
			}
			if kb, e := strconv.ParseFloat(strings.TrimSuffix(testutil.ProcStatus(cmd.Process.Pid)["VmRSS"], " kB"), 64); e == nil {
				rss = append(rss, kb)
			}
		}
	}
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr.String())
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	share := 100 * cpu.Seconds() / time.Since(start).Seconds()
	if len(rss) < 6 {
		t.Fatalf("only %d RSS readings", len(rss))
	}
	peak := func(x []float64) float64 { return slices.Max(x) }
	n := len(rss) / 3
	first, last := peak(rss[:n]), peak(rss[len(rss)-n:])
	sorted := append([]float64(nil), rss...)
	slices.Sort(sorted)
	fmt.Printf("BENCHMARKS: agent soak %v, 19 Hz + offcpu, 15 s windows, busy.py (%s): observer CPU %.2f %% of one core, RSS after %v: %.1f–%.1f MiB (median %.1f), peak first third %.1f MiB, last third %.1f MiB, %d windows exported\n",
		dur, in.Label, share, warm, sorted[0]/1024, sorted[len(sorted)-1]/1024, sorted[len(sorted)/2]/1024, first/1024, last/1024, len(g.requests()))
	if last > 1.1*first {
		t.Errorf("RSS grew after %v: peak %.1f MiB in the first third, %.1f MiB in the last", warm, first/1024, last/1024)
	}
	if share > 1 {
		t.Errorf("observer CPU %.2f %% of one core, bar 1 %%", share)
	}
}

// Flags that do nothing for the agent, and a --metrics that is no address,
// are refused at once with one line and exit 2; an address that is well
// formed but can't be bound is a runtime error (1) that says so in one line.
func TestAgentFlagRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), "import time\nprint('READY', flush=True)\ntime.sleep(600)\n", nil)
	pid := strconv.Itoa(tg.Pid)
	dir := t.TempDir()
	out := filepath.Join(dir, "x.txt")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--metrics", "127.0.0.1:0", "--format", "json"}, 2, "agent: --format does nothing here"},
		{[]string{"--metrics", "127.0.0.1:0", "-o", out}, 2, "agent: -o does nothing here"},
		{[]string{"--metrics", "notanaddress"}, 2, `agent: --metrics "notanaddress": want HOST:PORT`},
		{[]string{"--metrics", "127.0.0.1:nosuchservice"}, 2, `port "nosuchservice" is neither a number`},
		{[]string{"--metrics", "127.0.0.1:99999"}, 2, `port "99999" is neither a number in 0..65535`},
		{[]string{"--metrics", "192.0.2.1:9464"}, 1, `--metrics "192.0.2.1:9464": can't listen`},
		// Labels of pyobs's own series: a second "mode" on the CPU
		// counter made the whole scrape unparseable.
		{[]string{"--metrics", "127.0.0.1:0", "--label", "mode=prod"}, 2, `--label "mode=prod": mode is a label of pyobs's own`},
		{[]string{"--metrics", "127.0.0.1:0", "--label", "pid=abc"}, 2, `--label "pid=abc": pid is a label of pyobs's own`},
		{[]string{"--metrics", "127.0.0.1:0", "--", "python3", "x.py"}, 2, "agent: observes running processes (-p PID, --cgroup, --all), not a command"},
	} {
		r := testutil.Run(t, 30*time.Second, append([]string{"agent", "-p", pid, "-d", "2s"}, c.args...)...)
		if r.Code != c.code || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("agent %v: exit %d, want %d and one line with %q\nstderr: %s", c.args, r.Code, c.code, c.want, r.Stderr)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("agent -o left %d files in %s", len(ents), dir)
	}
}

// TestAgentOffcpuWindowBound: an off-CPU span shorter than a second (each
// loads offcpu's engine anew) is refused, one line, exit 2.
func TestAgentOffcpuWindowBound(t *testing.T) {
	for _, w := range []string{"1ns", "500ms"} {
		r := testutil.Run(t, 10*time.Second, "agent", "-p", "1", "--metrics", "127.0.0.1:0", "--offcpu", "--offcpu-window", w)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, "--offcpu-window "+w+" is too short") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("--offcpu-window %s: exit %d, %q", w, r.Code, r.Stderr)
		}
	}
}
