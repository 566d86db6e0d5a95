package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// startPrometheus runs Debian's prometheus scraping 127.0.0.1:mport every
// 500 ms and returns its API's base URL.
func startPrometheus(t *testing.T, mport int) string {
	t.Helper()
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		testutil.Skip(t, "Debian's prometheus is not installed (apt-get install prometheus)")
	}
	dir := t.TempDir()
	pport := freePort(t)
	cfg := fmt.Sprintf("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: pyobs\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n", mport)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startCmd(t, filepath.Join(dir, "prometheus.log"), prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", pport))
	waitPort(t, fmt.Sprintf("127.0.0.1:%d", pport), 20*time.Second)
	return fmt.Sprintf("http://127.0.0.1:%d", pport)
}

// pacedLoad sends GETs on one keep-alive connection at rate per second
// for d: every 10th to /err (500), the rest to /ok. It returns the
// requests answered and the 500s, as the client counted them.
func pacedLoad(t *testing.T, port, rate int, d time.Duration) (n, errs int) {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for i := 1; time.Now().Before(end); i++ {
		<-tick.C
		path := fmt.Sprintf("/ok/%d", i)
		if i%10 == 0 {
			path = fmt.Sprintf("/err/%d", i)
		}
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
			t.Fatalf("write: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n++
		if resp.StatusCode >= 500 {
			errs++
		}
	}
	return n, errs
}

// TestAgentPrometheusRED: `agent --red --metrics` under Debian's prometheus;
// a client sends a paced load (50 requests/s, one in ten a 500) and counts
// what it got. PromQL gives red's totals exactly and its request rate; the
// duration histogram holds every request.
func TestAgentPrometheusRED(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	mport := freePort(t)
	base := startPrometheus(t, mport)
	tg, port := startRedTarget(t, "http")
	agentCmd := exec.Command(testutil.Binary(t), "agent", "-p", strconv.Itoa(tg.Pid), "--window", "1s", "-d", "60s",
		"--red", "--metrics", fmt.Sprintf("127.0.0.1:%d", mport))
	var stderr bytes.Buffer
	agentCmd.Stderr = &stderr
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = agentCmd.Process.Kill(); _, _ = agentCmd.Process.Wait() }()
	// red's two tracepoints are attached by the time the first window is
	// scraped (red starts with the agent's first window).
	sel := fmt.Sprintf(`{job="pyobs",service="red_http",port="%d"}`, port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if w := promQuery(t, base, `pyobs_windows_total{job="pyobs",service="red_http"}`); len(w) == 1 && w[0] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no window from the agent in prometheus after 20 s\nagent: %s", stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	const rate = 50
	n, errs := pacedLoad(t, port, rate, 12*time.Second)
	// The rate over the last 8 s of a steady load; red's counts move once
	// per report (1 s windows): ±1 report in 8 s is the granularity.
	time.Sleep(1500 * time.Millisecond)
	got := promQuery(t, base, `sum(rate(pyobs_red_requests_total`+sel+`[8s] offset 1500ms))`)
	want := float64(n) / 12
	t.Logf("client: %d requests (%d errors) at %.1f/s; PromQL rate %v", n, errs, want, got)
	if len(got) != 1 || got[0] < want*0.8 || got[0] > want*1.2 {
		t.Errorf("PromQL request rate %v, the client sent %.1f/s (±20 %%: one 1 s report in the 8 s range)", got, want)
	}
	// Totals are exact once the last report is in.
	var total, errTotal, hist []float64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		total = promQuery(t, base, `sum(pyobs_red_requests_total`+sel+`)`)
		errTotal = promQuery(t, base, `sum(pyobs_red_errors_total`+sel+`)`)
		hist = promQuery(t, base, `sum(pyobs_red_request_duration_seconds_count`+sel+`)`)
		if len(total) == 1 && total[0] == float64(n) && len(hist) == 1 && hist[0] == float64(n) {
			break
		}
	}
	if len(total) != 1 || total[0] != float64(n) {
		t.Errorf("pyobs_red_requests_total %v, the client had %d answered", total, n)
	}
	if len(errTotal) != 1 || errTotal[0] != float64(errs) {
		t.Errorf("pyobs_red_errors_total %v, the client got %d 500s", errTotal, errs)
	}
	if len(hist) != 1 || hist[0] != float64(n) {
		t.Errorf("duration histogram count %v, want %d", hist, n)
	}
	// /ok answers in ~1 ms: nearly all under 25 ms even beside the hog.
	if q := promQuery(t, base, `histogram_quantile(0.5, sum by (le) (pyobs_red_request_duration_seconds_bucket`+sel+`))`); len(q) != 1 || q[0] <= 0 || q[0] > 0.025 {
		t.Errorf("median duration from the histogram %v s, want in (0, 25 ms]", q)
	}
}
