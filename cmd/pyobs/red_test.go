package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/testutil"
)

func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// startRedTarget starts red_http.py in mode and returns it with its port.
func startRedTarget(t *testing.T, mode string) (*testutil.Target, int) {
	py := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, py, "red_http.py", mode)
	select {
	case l := <-tg.Lines:
		var port int
		if _, err := fmt.Sscanf(l, "PORT %d", &port); err != nil {
			t.Fatalf("target said %q, want PORT n", l)
		}
		return tg, port
	case <-time.After(10 * time.Second):
		t.Fatal("target did not print its port")
	}
	return nil, 0
}

// startRed starts pyobs with args and returns once its two raw tracepoint
// links are in place (seen in its /proc fdinfo), so what the test does next
// is observed; wait returns its result.
func startRed(t *testing.T, args ...string) (wait func() testutil.Result) {
	return startRedLinks(t, 2, args...)
}

// startRedLinks is startRed waiting for n raw tracepoint links (3: the
// kernel sampler's sched_switch program too).
func startRedLinks(t *testing.T, n int, args ...string) (wait func() testutil.Result) {
	cmd := exec.Command(testutil.Binary(t), args...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for rawTPLinks(cmd.Process.Pid) < n {
		select {
		case <-done:
			t.Fatalf("pyobs %v exited before attaching: %s", args, se.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pyobs %v did not attach within 20s", args)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() testutil.Result {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("pyobs %v did not finish", args)
		}
		return testutil.Result{Stdout: so.String(), Stderr: se.String(), Code: cmd.ProcessState.ExitCode()}
	}
}

func rawTPLinks(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), "link_type:\traw_tracepoint") {
			n++
		}
	}
	return n
}

// clientReq is one request as the load generator saw it.
type clientReq struct {
	end    int64 // CLOCK_MONOTONIC ns when the response body was read
	dur    time.Duration
	status int
	path   string
}

// load runs keep-alive workers against port until stop (or max requests)
// with a fixed mix by sequence number: 2 % /err (500), 1.5 % /slow (200
// ms), 1 % /missing (404), the rest /ok (~1 ms). 1.5 % slow, not 1 %, so
// that the p99 falls inside the slow group rather than on its edge.
func load(t *testing.T, port, workers, max int, stop <-chan struct{}) func() []clientReq {
	var seq atomic.Int64
	var mu sync.Mutex
	var all []clientReq
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			var mine []clientReq
			defer func() { mu.Lock(); all = append(all, mine...); mu.Unlock() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := seq.Add(1)
				if i > int64(max) {
					return
				}
				path := fmt.Sprintf("/ok/%d", i)
				switch {
				case i%50 == 0:
					path = fmt.Sprintf("/err/%d", i)
				case i%200 == 7 || i%200 == 77 || i%200 == 147:
					path = fmt.Sprintf("/slow/%d", i)
				case i%100 == 3:
					path = fmt.Sprintf("/missing/%d", i)
				}
				t0 := time.Now()
				if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Errorf("read response: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, clientReq{end: monoNs(), dur: time.Since(t0), status: resp.StatusCode, path: path})
			}
		}()
	}
	return func() []clientReq { wg.Wait(); return all }
}

func findPort(t *testing.T, r *red.Result, port int) red.PortReport {
	for _, p := range r.Ports {
		if p.Port == port {
			return p
		}
	}
	t.Fatalf("port %d not in report: %+v", port, r.Ports)
	return red.PortReport{}
}

// TestRedHTTP: a ThreadingHTTPServer under a known keep-alive mix; rate,
// error rate, 4xx rate and p99 agree with what the client measured over
// pyobs's own window, and --slowest names the slow requests with the slow
// handler's Python stack. Nothing is stopped.
func TestRedHTTP(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "http")
	stop := make(chan struct{})
	wait := load(t, port, 8, 40000, stop)
	time.Sleep(300 * time.Millisecond) // connections open before the attach
	res := testutil.Run(t, 60*time.Second, "red", "-p", fmt.Sprint(tg.Pid), "-d", "3s", "--slowest", "5", "--format", "json")
	close(stop)
	reqs := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	p := findPort(t, &r, port)

	// Ground truth: the client's requests that completed inside the window.
	var n, errs, c4 int
	var durs []time.Duration
	for _, q := range reqs {
		if q.end < r.StartNs || q.end > r.EndNs {
			continue
		}
		n++
		durs = append(durs, q.dur)
		switch {
		case q.status >= 500:
			errs++
		case q.status >= 400:
			c4++
		}
	}
	// 600 keeps ≥ 6 slow requests (1.5 %) in the window, so p99 and the 5
	// slowest fall among them.
	if n < 600 {
		t.Fatalf("only %d client requests in the window: load too low to compare", n)
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	p99 := durs[int(math.Ceil(0.99*float64(n)))-1]
	rate := float64(n) / r.WindowS
	cErr, c4p := 100*float64(errs)/float64(n), 100*float64(c4)/float64(n)
	t.Logf("client: %d req, %.1f/s, err %.2f%%, 4xx %.2f%%, p99 %v; pyobs: %d req, %.1f/s, err %.2f%%, 4xx %.2f%%, p99 %.1fms, events %d, drops %+v",
		n, rate, cErr, c4p, p99, p.Requests, p.RatePerS, p.ErrorPct, p.Client4xxPc, p.Duration.P99Ms, r.Events, r.Drops)
	if math.Abs(p.RatePerS-rate) > 0.05*rate {
		t.Errorf("rate %.1f/s, client saw %.1f/s (more than 5%% apart)", p.RatePerS, rate)
	}
	if math.Abs(p.ErrorPct-cErr) > 0.5 {
		t.Errorf("error rate %.2f%%, client saw %.2f%%", p.ErrorPct, cErr)
	}
	if math.Abs(p.Client4xxPc-c4p) > 0.5 {
		t.Errorf("4xx rate %.2f%%, client saw %.2f%%", p.Client4xxPc, c4p)
	}
	cp99 := float64(p99) / 1e6
	if p.Duration == nil || math.Abs(p.Duration.P99Ms-cp99) > 0.15*cp99 {
		t.Errorf("p99 %+v ms, client measured %.1f ms", p.Duration, cp99)
	}
	if p.Proto != "http" || p.Status["500"] == 0 || p.Status["404"] == 0 {
		t.Errorf("proto %q status %v", p.Proto, p.Status)
	}
	routes := map[string]bool{}
	for _, rt := range p.Routes {
		routes[rt.Route] = true
	}
	for _, want := range []string{"GET /ok/:id", "GET /err/:id", "GET /slow/:id", "GET /missing/:id"} {
		if !routes[want] {
			t.Errorf("route %s missing: %v", want, routes)
		}
	}
	if len(r.Slowest) != 5 {
		t.Fatalf("slowest has %d entries, want 5", len(r.Slowest))
	}
	for _, s := range r.Slowest {
		if !strings.HasPrefix(s.Path, "/slow/") || s.Status != 200 || s.DurationMs < 190 {
			t.Errorf("slowest entry %+v is not a 200 ms /slow/ request", s)
		}
		found := false
		for _, f := range s.Stack {
			if f.Function == "slow_handler" && strings.HasSuffix(f.File, "red_http.py") {
				found = true
			}
		}
		if !found || s.StackReads == 0 {
			t.Errorf("slowest %s: stack %+v (reads %d) lacks slow_handler", s.Path, s.Stack, s.StackReads)
		}
	}
	if r.StackReads == 0 || r.Price == "" {
		t.Errorf("stack reads %d, price %q", r.StackReads, r.Price)
	}
	if st := testutil.ProcStatus(tg.Pid); st["TracerPid"] != "0" {
		t.Errorf("target traced: %v", st)
	}
}

// TestRedSlowestVersions: the --slowest stack is read on the interpreter
// versions whose thread lists differ (3.10 has no native thread id; 3.13;
// static sid 3.15): each slow request shows slow_handler.
func TestRedSlowestVersions(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.10", "pyenv-3.13", "sid-3.15"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			tg := testutil.Start(t, py, "red_http.py", "http")
			var port int
			select {
			case l := <-tg.Lines:
				fmt.Sscanf(l, "PORT %d", &port)
			case <-time.After(10 * time.Second):
				t.Fatal("no port")
			}
			wait := startRed(t, "red", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "--slowest", "2", "--format", "json")
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/slow/%d", port, i))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}()
			}
			wg.Wait()
			res := wait()
			var r red.Result
			if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil || res.Code != 0 {
				t.Fatalf("exit %d, %v: %s %s", res.Code, err, res.Stdout, res.Stderr)
			}
			if len(r.Slowest) != 2 {
				t.Fatalf("slowest: %+v", r.Slowest)
			}
			for _, s := range r.Slowest {
				ok := len(s.Stack) > 0 && s.Stack[0].Function == "slow_handler" && s.StackSeen > 0
				if !ok || !strings.HasPrefix(s.Path, "/slow/") {
					t.Errorf("%s: stack %+v (seen %d of %d)", s.Path, s.Stack, s.StackSeen, s.StackReads)
				}
			}
		})
	}
}

// TestRedAsyncio: the same mix served by asyncio streams on one thread
// (non-blocking sockets: EAGAIN reads, the loop's own fds): rate and error
// rate agree with the client's over pyobs's window.
func TestRedAsyncio(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "asyncio")
	stop := make(chan struct{})
	wait := load(t, port, 4, 40000, stop)
	time.Sleep(200 * time.Millisecond)
	res := testutil.Run(t, 60*time.Second, "red", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "--format", "json")
	close(stop)
	reqs := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	p := findPort(t, &r, port)
	var n, errs int
	for _, q := range reqs {
		if q.end >= r.StartNs && q.end <= r.EndNs {
			n++
			if q.status >= 500 {
				errs++
			}
		}
	}
	if n < 300 {
		t.Fatalf("only %d client requests in the window", n)
	}
	rate, cErr := float64(n)/r.WindowS, 100*float64(errs)/float64(n)
	t.Logf("client: %d req %.1f/s err %.2f%%; pyobs: %d req %.1f/s err %.2f%%", n, rate, cErr, p.Requests, p.RatePerS, p.ErrorPct)
	if math.Abs(p.RatePerS-rate) > 0.05*rate || math.Abs(p.ErrorPct-cErr) > 0.5 {
		t.Errorf("pyobs %.1f/s err %.2f%%, client %.1f/s err %.2f%%", p.RatePerS, p.ErrorPct, rate, cErr)
	}
}

// TestRedResetLive: clients that reset /big mid-response count as errors
// ("reset during the response"), and two requests pipelined in one write
// are split into two (a 200 and a 404); in live mode on a pipe (a JSON
// line per interval).
func TestRedResetLive(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "http")
	const resets = 3
	wait := startRed(t, "red", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-i", "1s")
	for i := 0; i < resets; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil { // headers only
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close sends RST
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /fast/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /missing/2 HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	for _, want := range []int{200, 404} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("pipelined response: %v %v, want %d", resp, err, want)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	c.Close()
	res := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 {
		t.Fatalf("want a JSON line per interval, got %q", res.Stdout)
	}
	var aborted, errs, reqs, c4 uint64
	routes := map[string]uint64{}
	for _, l := range lines {
		var r red.Result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", l, err)
		}
		if r.Mode != "interval" {
			// The last line too: it is the last interval's, not the run's.
			t.Errorf("a live line of mode %q, want interval: %s", r.Mode, l)
		}
		for _, p := range r.Ports {
			if p.Port == port {
				aborted += p.Aborted["reset during the response"]
				errs += p.Errors
				reqs += p.Requests
				c4 += p.Client4xx
				for _, rt := range p.Routes {
					routes[rt.Route] += rt.Requests
				}
			}
		}
	}
	if aborted != resets || errs != resets || reqs != resets+2 || c4 != 1 {
		t.Errorf("aborted %d, errors %d (want %d each), requests %d (want %d), 4xx %d (want 1)\n%s", aborted, errs, resets, reqs, resets+2, c4, res.Stdout)
	}
	if routes["GET /fast/:id"] != 1 || routes["GET /missing/:id"] != 1 || routes["GET /big"] != resets {
		t.Errorf("routes %v", routes)
	}
}

// TestRedEcho: a raw TCP echo server gets connection-level RED and the
// "not parsed" note; bytes match what the client sent and got back.
func TestRedEcho(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "echo")
	const conns, size = 20, 1000
	wait := startRed(t, "red", "-p", fmt.Sprint(tg.Pid), "-d", "1500ms", "--format", "json")
	msg := []byte(strings.Repeat("hello echo\n", size/11+1)[:size])
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// The start of a TLS ClientHello: a record header, then the handshake.
	hello := []byte("\x16\x03\x01\x00\x2a\x01\x00\x00\x26\x03\x03 not really encrypted")
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, len(hello))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	res := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	p := findPort(t, &r, port)
	if p.Proto != "other" || p.Requests != 0 {
		t.Errorf("proto %q, %d requests; want other, 0", p.Proto, p.Requests)
	}
	bytes := uint64(conns*size + 2*len(hello))
	if p.Conns.Opened != conns+2 || p.Conns.Closed != conns+2 || p.Conns.BytesIn != bytes || p.Conns.BytesOut != bytes || p.Conns.Duration == nil {
		t.Errorf("connections %+v; want %d opened and closed, %d bytes each way (events %d, drops %+v)\n%s", p.Conns, conns+2, bytes, r.Events, r.Drops, res.Stdout)
	}
	np := map[string]uint64{}
	for _, x := range p.NotParsed {
		np[x.Why] = x.Connections
	}
	if len(np) != 2 || np["first bytes are not an HTTP/1.x request line"] != conns || np["TLS handshake (encrypted: only connection-level numbers)"] != 2 {
		t.Errorf("not parsed: %+v", p.NotParsed)
	}
	txt := testutil.Run(t, 30*time.Second, "red", "-p", fmt.Sprint(tg.Pid), "-d", "200ms")
	if txt.Code != 0 || !strings.Contains(txt.Stdout, "price: eBPF tracepoints on syscalls, no stops") || !strings.Contains(txt.Stdout, fmt.Sprintf("\n%d ", port)) {
		t.Errorf("text output (exit %d): %s %s", txt.Code, txt.Stdout, txt.Stderr)
	}
}

// TestRedFdReuse: a server that reads a file before each accept hands the
// file's number to the next connection. pyobs learns an fd it did not see
// opened from /proc, later than the call; by then the file's number is the
// connection's, and the file's read and close were taken for a connection
// opened and closed (closed > opened, the file's bytes counted as the
// connection's). The kernel says at each call whether the fd is a socket.
// Ground truth: the client's own connections and bytes.
func TestRedFdReuse(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "reuse")
	const conns, size = 8, 100
	wait := startRed(t, "red", "-p", fmt.Sprint(tg.Pid), "-d", "3s", "--format", "json")
	msg := []byte(strings.Repeat("x", size))
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2; j++ {
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			if j == 0 {
				time.Sleep(200 * time.Millisecond) // held open past pyobs's next look
			}
		}
		c.Close()
	}
	res := wait()
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, res.Stdout)
	}
	p := findPort(t, &r, port)
	bytes := uint64(conns * 2 * size)
	if p.Conns.Opened != conns || p.Conns.Closed != conns || p.Conns.BytesIn != bytes || p.Conns.BytesOut != bytes {
		t.Errorf("connections %+v; want %d opened and closed, %d bytes each way (events %d, drops %+v)\n%s", p.Conns, conns, bytes, r.Events, r.Drops, res.Stdout)
	}
}

// TestRedSpawn: with -- CMD the probe is on before the server listens: its
// port is found by the first accept; -d ends the command and pyobs exits 0.
func TestRedSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	py := testutil.Find(t, "pyenv-3.12")
	out := filepath.Join(t.TempDir(), "red.json")
	argv := append([]string{"red", "-d", "2s", "--format", "json", "-o", out, "--"}, py.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "red_http.py"), "http")
	cmd := exec.Command(testutil.Binary(t), argv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout) // the command's own stdout comes through pyobs's
	port := 0
	for port == 0 && sc.Scan() {
		fmt.Sscanf(sc.Text(), "PORT %d", &port)
	}
	if port == 0 {
		t.Fatal("spawned server did not print its port")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	const n = 10
	for i := 0; i < n; i++ {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/fast/%d", port, i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pyobs red -- CMD: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pyobs red -- CMD did not end after -d")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r red.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, b)
	}
	p := findPort(t, &r, port)
	if p.Requests != n || p.Routes[0].Route != "GET /fast/:id" || p.Conns.Opened == 0 || p.Queue == nil {
		t.Errorf("port %+v", p)
	}
}

// TestRedUsage: bad flags are one line and exit 2.
func TestRedUsage(t *testing.T) {
	for _, args := range [][]string{
		{"red", "-p", "1", "--format", "svg"},
		{"red", "-p", "1", "-d", "0s"},
		{"red", "-p", "1", "--slowest", "-1"},
		{"red", "-p", "1", "--sample-hz", "-5"},
		{"red", "-p", "1", "--profile", "x.png"},
		{"red", "-p", "1", "--profile", "x.svg", "-i", "1s"},
		{"red", "-p", "1", "--profile", "x.svg", "--sample-hz", "0"},
		{"red"},
	} {
		res := testutil.Run(t, 10*time.Second, args...)
		if res.Code != exitUsage || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, res.Code, res.Stderr)
		}
	}
	// --profile is an output: refused before the window as -o is, and
	// its advice is red's (red has no --format for profiles).
	for _, c := range []struct {
		args    []string
		says    string
		mustNot string
	}{
		{[]string{"red", "-p", "1", "--profile", "/nonexistent-pyobs-dir/x.svg"}, "directory /nonexistent-pyobs-dir does not exist", ""},
		{[]string{"red", "-p", "1", "--profile", "x.png"}, "--profile: can't tell the format of x.png", "--format"},
	} {
		res := testutil.Run(t, 10*time.Second, c.args...)
		if res.Code != exitUsage || !strings.Contains(res.Stderr, c.says) || (c.mustNot != "" && strings.Contains(res.Stderr, c.mustNot)) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", c.args, res.Code, res.Stderr, exitUsage, c.says)
		}
	}
}
