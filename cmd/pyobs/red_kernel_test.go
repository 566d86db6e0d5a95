package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/testutil"
)

// redCPULog is one line of red_cpu.py's own log: the path it served, on
// which thread, and which handler ran.
type redCPULog struct {
	tid        int
	start, end int64
	handler    string
}

func readRedCPULog(t *testing.T, path string) map[string]redCPULog {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]redCPULog{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p string
		var l redCPULog
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %d %s", &p, &l.tid, &l.start, &l.end, &l.handler); err != nil {
			t.Fatalf("target log line %q: %v", sc.Text(), err)
		}
		out[p] = l
	}
	return out
}

// TestRedKernelSlowest: kernel samples joined to requests. A server whose
// slow path is 40-60 ms of CPU in slow_handler → compute, under a bounded
// keep-alive load (every 8th request slow): every request in --slowest
// that lasted at least two sample periods has a stack with the handler the
// target's own log says it ran, taken from the kernel's samples of its
// thread; --profile out.folded has the route root frames and the handler
// under the slow route only.
func TestRedKernelSlowest(t *testing.T) {
	testutil.RequireRoot(t)
	const hz = 499
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			py := testutil.Find(t, label)
			dir := t.TempDir()
			logPath := filepath.Join(dir, "requests.log")
			tg := testutil.Start(t, py, "red_cpu.py", logPath)
			var port int
			select {
			case l := <-tg.Lines:
				if _, err := fmt.Sscanf(l, "PORT %d", &port); err != nil {
					t.Fatalf("target said %q, want PORT n", l)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no port")
			}
			folded := filepath.Join(dir, "out.folded")
			wait := startRedLinks(t, 3, "red", "-p", fmt.Sprint(tg.Pid), "-d", "4s", "--slowest", "10",
				"--sample-hz", fmt.Sprint(hz), "--profile", folded, "--format", "json")
			time.Sleep(50 * time.Millisecond) // its per-CPU events are enabled just after the switch program
			var wg sync.WaitGroup
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					br := bufio.NewReader(c)
					end := time.Now().Add(2500 * time.Millisecond)
					for i := 0; i < 40 && time.Now().Before(end); i++ {
						id := w*1000 + i
						path := fmt.Sprintf("/ok/%d", id)
						if i%8 == 3 {
							path = fmt.Sprintf("/slow/%d", id)
						}
						if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
							t.Error(err)
							return
						}
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}(w)
			}
			wg.Wait()
			res := wait()
			var r red.Result
			if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil || res.Code != 0 {
				t.Fatalf("exit %d, %v: %s %s", res.Code, err, res.Stdout, res.Stderr)
			}
			k := r.Sampling
			if k == nil || k.Engine != "bpf" || k.Samples == 0 || k.Joined == 0 {
				t.Fatalf("sampling account %+v: want kernel samples joined to requests", k)
			}
			truth := readRedCPULog(t, logPath)
			period := 1e3 / float64(hz) // ms
			checked, slowChecked := 0, 0
			for _, s := range r.Slowest {
				lg, ok := truth[s.Path]
				if !ok {
					t.Errorf("%s: not in the target's log", s.Path)
					continue
				}
				if s.Tid != uint32(lg.tid) {
					t.Errorf("%s: tid %d, the target served it on %d", s.Path, s.Tid, lg.tid)
				}
				if s.DurationMs < 2*period {
					continue
				}
				checked++
				// The slow path's time is in its handler; a fast request
				// is long only when it waited (for the GIL the slow ones
				// hold): its stack is where it waited, in the request. So
				// is a slow request's when it waited about as long as its
				// handler ran: from the target's own log, the handler's
				// time against the request's (its read of the request line
				// woke into another handler's GIL).
				want := []string{lg.handler}
				handlerMs := float64(lg.end-lg.start) / 1e6
				if lg.handler == "fast_handler" {
					want = []string{"BaseHTTPRequestHandler.handle_one_request"}
				} else {
					slowChecked++
					if s.DurationMs-handlerMs >= handlerMs/2 {
						want = append(want, "BaseHTTPRequestHandler.handle_one_request")
					}
				}
				has := false
				for _, f := range s.Stack {
					for _, w := range want {
						has = has || f.Function == w
					}
				}
				if !has || s.StackSource != "kernel" || s.StackSamples < 1 {
					t.Errorf("%s (%.1f ms, ran %s for %.1f ms): stack %+v from %q, %d kernel samples, %d reads; want one of %v", s.Path, s.DurationMs, lg.handler, handlerMs, s.Stack, s.StackSource, s.StackSamples, s.StackReads, want)
				}
			}
			if slowChecked < 3 {
				t.Errorf("only %d of the slowest ran the slow path for 2 sample periods: %+v", slowChecked, r.Slowest)
			}
			b, err := os.ReadFile(folded)
			if err != nil {
				t.Fatal(err)
			}
			var slowWith, okWith, okRoot int
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				switch {
				case strings.HasPrefix(l, "[route] GET /slow/:id;"):
					if strings.Contains(l, ";slow_handler (") && strings.Contains(l, ";compute (") {
						slowWith++
					}
				case strings.HasPrefix(l, "[route] GET /ok/:id;"):
					okRoot++
					if strings.Contains(l, "slow_handler") {
						okWith++
					}
				case strings.HasPrefix(l, "[route] "), strings.HasPrefix(l, "[no request];"), strings.HasPrefix(l, "[port "):
				default:
					t.Errorf("folded line without a route root: %q", l)
				}
			}
			if slowWith == 0 || okWith != 0 {
				t.Errorf("profile: %d slow-route stacks with slow_handler → compute, %d fast-route stacks with slow_handler (want >0, 0):\n%s", slowWith, okWith, b)
			}
			t.Logf("%s: %d samples, %d walked, %d joined, %d outside; %d slowest checked (%d slow path); %d slow / %d ok stacks in the profile",
				label, k.Samples, k.Walked, k.Joined, k.Outside, checked, slowChecked, slowWith, okRoot)
		})
	}
}

// TestRedSampleFallback: --sample-hz 0 keeps the user-space reads and says so.
func TestRedSampleFallback(t *testing.T) {
	testutil.RequireRoot(t)
	tg, port := startRedTarget(t, "http")
	wait := startRed(t, "red", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "--slowest", "1", "--sample-hz", "0", "--format", "json")
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/slow/1", port))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	res := wait()
	var r red.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil || res.Code != 0 {
		t.Fatalf("exit %d, %v: %s %s", res.Code, err, res.Stdout, res.Stderr)
	}
	if r.Sampling == nil || r.Sampling.Engine != "user-read" || r.Sampling.Fallback != "--sample-hz 0" {
		t.Fatalf("sampling %+v: want user-read, --sample-hz 0", r.Sampling)
	}
	if len(r.Slowest) != 1 || r.Slowest[0].StackSource != "user-read" || r.Slowest[0].Stack[0].Function != "slow_handler" {
		t.Fatalf("slowest %+v", r.Slowest)
	}
}
