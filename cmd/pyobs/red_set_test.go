package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/testutil"
)

// setCounts is one side's count of a bounded load: by status class, and
// per worker when the side knows it.
type setCounts struct {
	requests, errors, client4xx int
	byWorker                    map[int]*setCounts
}

// setLoad sends n GET requests to port over conc keep-alive clients (the
// server decides when a connection ends): every 20th /err/ (500), every
// 25th /missing/ (404), every 100th /slow/ (50 ms, 200), the rest /ok/. It returns the client's own counts,
// per worker when the response names it (X-Worker).
func setLoad(t *testing.T, port, n, conc int) setCounts {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var seq atomic.Int64
	var mu sync.Mutex
	got := setCounts{byWorker: map[int]*setCounts{}}
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := seq.Add(1)
				if i > int64(n) {
					return
				}
				path := fmt.Sprintf("/ok/%d", i)
				switch {
				case i%20 == 0:
					path = fmt.Sprintf("/err/%d", i)
				case i%25 == 1:
					path = fmt.Sprintf("/missing/%d", i)
				case i%100 == 50:
					path = fmt.Sprintf("/slow/%d", i)
				}
				resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				add := func(c *setCounts) {
					c.requests++
					switch {
					case resp.StatusCode >= 500:
						c.errors++
					case resp.StatusCode >= 400:
						c.client4xx++
					}
				}
				add(&got)
				if pid, err := strconv.Atoi(resp.Header.Get("X-Worker")); err == nil {
					if got.byWorker[pid] == nil {
						got.byWorker[pid] = &setCounts{}
					}
					add(got.byWorker[pid])
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

// startRedSet starts pyobs with args and waits until n raw tracepoint
// links are attached (red's two and the set's fork, exec and exit: 5);
// wait returns its result once it exits.
func startRedSet(t *testing.T, n int, args ...string) (wait func() testutil.Result) {
	t.Helper()
	return startRedLinks(t, n, args...)
}

// within: got is want ±0.5 % (and exact for small counts).
func within(got, want uint64) bool {
	return math.Abs(float64(got)-float64(want)) <= 0.005*float64(want)
}

// checkSetReport compares red's report for port with the truth: the
// total, and per worker (pid -> counts).
func checkSetReport(t *testing.T, r *red.Result, port int, total setCounts, workers map[int]*setCounts) {
	t.Helper()
	if len(r.Ports) == 0 {
		t.Fatalf("no port in the report: events %d, drops %+v, processes %+v %+v, notes %q", r.Events, r.Drops, r.ProcessCounts, r.Processes, r.Notes)
	}
	p := findPort(t, r, port)
	t.Logf("port %d: red %d requests, %d errors, %d 4xx; truth %d, %d, %d", port, p.Requests, p.Errors, p.Client4xx,
		total.requests, total.errors, total.client4xx)
	if !within(p.Requests, uint64(total.requests)) || p.Errors != uint64(total.errors) || p.Client4xx != uint64(total.client4xx) {
		t.Errorf("port %d: red counted %d requests, %d errors, %d 4xx; the truth is %d, %d, %d",
			port, p.Requests, p.Errors, p.Client4xx, total.requests, total.errors, total.client4xx)
	}
	seen := map[int]red.WorkerReport{}
	var sum uint64
	for _, w := range p.Workers {
		seen[w.Pid] = w
		sum += w.Requests
	}
	if sum != p.Requests {
		t.Errorf("the workers' requests add up to %d, the port's to %d", sum, p.Requests)
	}
	for pid, c := range workers {
		w := seen[pid]
		t.Logf("  worker %d: red %d requests, %d errors; truth %d, %d", pid, w.Requests, w.Errors, c.requests, c.errors)
		if !within(w.Requests, uint64(c.requests)) || w.Errors != uint64(c.errors) || w.Client4xx != uint64(c.client4xx) {
			t.Errorf("worker %d: red counted %d requests, %d errors, %d 4xx; it served %d, %d, %d",
				pid, w.Requests, w.Errors, w.Client4xx, c.requests, c.errors, c.client4xx)
		}
		if c.requests > 0 && w.Duration == nil {
			t.Errorf("worker %d: no duration quantiles", pid)
		}
		delete(seen, pid)
	}
	for pid, w := range seen {
		if w.Requests > 0 {
			t.Errorf("red counted %d requests for pid %d, which served none", w.Requests, pid)
		}
	}
}

// killTree kills pid and its descendants (a test's leftovers).
func killTree(pid int) {
	kids, _ := procfs.Default().Descendants(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
	}
	t.Fatalf("%s did not appear within %v", path, timeout)
	return ""
}

// TestRedPreforkServer: `red -- python prefork_server.py` (children
// followed by default): a parent binds the socket and forks 3 workers
// (os.fork; no multiprocessing start method involved) that accept on it;
// each worker retires after 300 requests and the parent forks a new one,
// so workers join while red runs and exit. Under a bounded load of 2,400
// requests red counts every request (±0.5 %) and every error exactly, in
// total and per worker (each worker's own count, written at its exit), and
// its account lists every worker, exited. --slowest 3: the slow route, in
// a worker, with the stack walked in the kernel and named in the worker's
// own memory: its slow_handler_<pid>, compiled after its fork, which the
// master does not have (at the address each sibling has its own).
func TestRedPreforkServer(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CPUHog(t, 1)
	py := testutil.Find(t, "pyenv-3.12")
	dir := t.TempDir()
	argv := append([]string{"red", "--format", "json", "--slowest", "3", "--"}, py.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "prefork_server.py"), dir, "3", "300")
	wait := startRedSet(t, 6, argv...) // the sampler's sched_switch too: it starts once Python is up
	var port, master int
	if _, err := fmt.Sscanf(waitFile(t, filepath.Join(dir, "port"), 20*time.Second), "%d %d", &port, &master); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killTree(master) }) // pyobs's child: not ended when pyobs is killed
	const n = 2400
	got := setLoad(t, port, n, 6)
	if got.requests != n {
		t.Fatalf("the client completed %d of %d requests", got.requests, n)
	}
	if err := syscall.Kill(master, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	// The workers' own counts.
	files, _ := filepath.Glob(filepath.Join(dir, "worker-*.json"))
	truth := setCounts{byWorker: map[int]*setCounts{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var w struct{ Pid, Requests, Errors, Client4xx int }
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		truth.byWorker[w.Pid] = &setCounts{requests: w.Requests, errors: w.Errors, client4xx: w.Client4xx}
		truth.requests += w.Requests
		truth.errors += w.Errors
		truth.client4xx += w.Client4xx
	}
	if truth.requests != got.requests || truth.errors != got.errors || len(truth.byWorker) < 8 {
		t.Fatalf("the workers' files (%d) say %d requests, %d errors; the client %d, %d (want ≥ 8 workers: 3 retiring every 300)",
			len(truth.byWorker), truth.requests, truth.errors, got.requests, got.errors)
	}
	checkSetReport(t, &r, port, truth, truth.byWorker)
	if len(r.Slowest) != 3 {
		t.Errorf("%d slowest requests, want 3", len(r.Slowest))
	}
	for _, s := range r.Slowest {
		var fns []string
		for _, f := range s.Stack {
			fns = append(fns, f.Function)
		}
		// Each worker's own handler, compiled after its fork: named
		// through that worker's memory (the master has no such code).
		if _, worker := truth.byWorker[s.Pid]; s.Route != "GET /slow/:id" || !worker || s.StackSource != "kernel" || len(fns) == 0 || fns[0] != fmt.Sprintf("slow_handler_%d", s.Pid) {
			t.Errorf("slowest %s (pid %d, a worker: %v): stack from %q: %v", s.Route, s.Pid, worker, s.StackSource, fns)
		}
	}
	if t.Failed() {
		t.Logf("account %+v %+v; drops %+v; notes %q", r.ProcessCounts, r.Processes, r.Drops, r.Notes)
	}
	// The account: the master and every worker, exited; the replacements
	// joined late.
	if r.ProcessCounts == nil {
		t.Fatalf("no process account: %s", res.Stdout)
	}
	members := map[int]bool{}
	for _, m := range r.Processes {
		members[m.Pid] = true
		if _, ok := truth.byWorker[m.Pid]; ok && !m.Exited {
			t.Errorf("worker %d exited, the account says it did not: %+v", m.Pid, m)
		}
	}
	for pid := range truth.byWorker {
		if !members[pid] {
			t.Errorf("worker %d is not in the account", pid)
		}
	}
	if !members[master] {
		t.Errorf("the master %d is not in the account", master)
	}
	if c := r.ProcessCounts; c.Late < len(truth.byWorker)-3 || c.Exited < len(truth.byWorker) || c.Seen != len(r.Processes) {
		t.Errorf("account %+v: want ≥ %d joined late, ≥ %d exited, seen = %d listed", *c, len(truth.byWorker)-3, len(truth.byWorker), len(r.Processes))
	}
}

// TestRedGunicorn: a real gunicorn from PyPI (scripts/pypkgs.sh), `-w 3`
// sync workers on a tiny WSGI app, observed with `red -p MASTER
// --children` after the workers started; `--max-requests 300` makes the
// master replace each worker during the load, so workers present and
// future are observed: red counts every request of a bounded load
// (±0.5 %) and every error exactly, in total and per worker (each response
// names its worker: the client's own counts are the truth).
func TestRedGunicorn(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	cache := os.Getenv("PYOBS_PYTHONS_CACHE")
	if cache == "" {
		cache = "/var/cache/pyobs-pythons"
	}
	pkgs := filepath.Join(cache, "pypkgs", "gunicorn")
	if _, err := os.Stat(filepath.Join(pkgs, ".ok")); err != nil {
		testutil.Skip(t, fmt.Sprintf("gunicorn is not installed (%v): run scripts/pypkgs.sh", err))
	}
	testutil.CPUHog(t, 1)
	dir := t.TempDir()
	logf := filepath.Join(dir, "gunicorn.log")
	args := append(append([]string{}, py.Argv[1:]...), "-m", "gunicorn", "-w", "3", "-k", "sync", "--max-requests", "300", "-b", "127.0.0.1:0",
		"--error-logfile", logf, "--log-level", "info", "--chdir", filepath.Join(testutil.Repo(), "testdata", "targets"), "wsgi_app:app")
	cmd := exec.Command(py.Argv[0], args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkgs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { killTree(cmd.Process.Pid); <-done })
	// Its port and its 3 workers, from its log.
	var port int
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logf)
		log := string(b)
		if i := strings.Index(log, "Listening at: http://127.0.0.1:"); i >= 0 && port == 0 {
			_, _ = fmt.Sscanf(log[i+len("Listening at: http://127.0.0.1:"):], "%d", &port)
		}
		if port != 0 && strings.Count(log, "Booting worker with pid") >= 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("gunicorn did not start 3 workers within 30s:\n%s", log)
		}
	}
	wait := startRedSet(t, 5, "red", "-p", fmt.Sprint(cmd.Process.Pid), "--children", "-d", "60s", "--format", "json")
	const n = 1500
	got := setLoad(t, port, n, 6)
	if got.requests != n {
		t.Fatalf("the client completed %d of %d requests", got.requests, n)
	}
	// gunicorn ends its workers and exits: red's target is gone, its
	// report covers the whole load.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	if len(got.byWorker) < 5 {
		t.Errorf("the responses name %d workers, want ≥ 5 (3, each replaced after 300 requests)", len(got.byWorker))
	}
	checkSetReport(t, &r, port, got, got.byWorker)
	// Every connection was opened and closed inside the window (none
	// before the load, and gunicorn exited). (A new worker's file read
	// whose number an accept took before pyobs looked: TestRedFdReuse.)
	if c := findPort(t, &r, port).Conns; c.Opened != c.Closed || c.Open != 0 {
		t.Errorf("connections %+v: want as many closed as opened, none open", c)
	}
	members := map[int]bool{}
	for _, m := range r.Processes {
		members[m.Pid] = true
	}
	for pid := range got.byWorker {
		if !members[pid] {
			t.Errorf("worker %d is not in the account", pid)
		}
	}
	if c := r.ProcessCounts; c == nil || c.Seen < 1+len(got.byWorker) || c.Late < len(got.byWorker)-3 {
		t.Errorf("account %+v: want the master and its %d workers, %d of them joined late", c, len(got.byWorker), len(got.byWorker)-3)
	}
}
