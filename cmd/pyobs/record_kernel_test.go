package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/testutil"
)

// The eBPF engine of record's cpu mode (internal/kwalk): the Python stack
// is walked in the kernel at each sample.

func requireKernelWalker(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	if runtime.GOARCH != "amd64" {
		testutil.Skip(t, "the in-kernel walker reads x86_64 layouts only")
	}
}

// kframe is one folded frame label, "QUALNAME (FILE:LINE)".
type kframe struct {
	fn, file string
	line     int
}

var labelRE = regexp.MustCompile(`^(.*) \((.*):(\d+)\)$`)

// readFoldedStacks reads folded output: each stack's labels (root first)
// and weight.
func readFoldedStacks(t *testing.T, path string) (stacks [][]string, weights []int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			t.Fatalf("folded line without a weight: %q", l)
		}
		w, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q: %v", l, err)
		}
		stacks = append(stacks, strings.Split(l[:i], ";"))
		weights = append(weights, w)
	}
	return stacks, weights
}

// deepGraph is kwalk_deep.py's call structure, read from its source: every
// function's line range, and each "# calls NAME" line's caller and callee.
type deepGraph struct {
	funcs map[string][2]int
	calls map[int][2]string
}

func readDeepGraph(t *testing.T) deepGraph {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.Repo(), "testdata", "targets", "kwalk_deep.py"))
	if err != nil {
		t.Fatal(err)
	}
	g := deepGraph{funcs: map[string][2]int{}, calls: map[int][2]string{}}
	def := regexp.MustCompile(`^(?:async )?def (\w+)\(`)
	mark := regexp.MustCompile(`# calls (\w+)$`)
	cur := "<module>"
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		if m := def.FindStringSubmatch(line); m != nil {
			cur = m[1]
			g.funcs[cur] = [2]int{n, n}
		} else if line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#") {
			cur = "<module>"
		}
		if r, ok := g.funcs[cur]; ok && cur != "<module>" && line != "" {
			g.funcs[cur] = [2]int{r[0], n}
		}
		if m := mark.FindStringSubmatch(line); m != nil {
			g.calls[n] = [2]string{cur, m[1]}
		}
	}
	return g
}

// check says why a stack (root first, thread frame removed) is not one the
// target's thread can have, or "". Frames of threading.py start the late
// thread; everything from its entry (late, or the main thread's <module>)
// on must follow the call structure line by line.
func (g deepGraph) check(labels []string, main bool) string {
	var fr []kframe
	for _, l := range labels {
		m := labelRE.FindStringSubmatch(l)
		if m == nil {
			return "not a Python frame: " + l
		}
		n, _ := strconv.Atoi(m[3])
		fr = append(fr, kframe{fn: m[1], file: m[2], line: n})
	}
	i := 0
	for i < len(fr) && strings.HasSuffix(fr[i].file, "threading.py") {
		i++
	}
	if main && i > 0 {
		return "main thread under threading.py"
	}
	own := fr[i:]
	if len(own) == 0 {
		return "" // a late thread still in threading's bootstrap
	}
	if filepath.Base(own[0].file) != "kwalk_deep.py" {
		return "" // a thread outside the target's code (starting or ending)
	}
	if !main && own[0].fn == "starter" && i > 0 {
		return "" // the thread that starts the late one: library calls, no marks
	}
	switch {
	case main && own[0].fn != "<module>":
		return "main thread's outermost frame is " + own[0].fn
	case !main && (own[0].fn != "late" || i == 0):
		return "late thread's outermost frames: " + own[0].fn
	}
	for k, f := range own {
		if filepath.Base(f.file) != "kwalk_deep.py" {
			return fmt.Sprintf("frame %d %s in %s", k, f.fn, f.file)
		}
		if k == len(own)-1 {
			r, ok := g.funcs[f.fn]
			if f.fn != "<module>" && (!ok || f.line < r[0] || f.line > r[1]) {
				return fmt.Sprintf("innermost %s at line %d: not in its function", f.fn, f.line)
			}
			continue
		}
		c, ok := g.calls[f.line]
		if !ok || c[0] != f.fn || c[1] != own[k+1].fn {
			return fmt.Sprintf("%s line %d does not call %s", f.fn, f.line, own[k+1].fn)
		}
	}
	return ""
}

var exactRE = regexp.MustCompile(`bpf engine: stacks walked in the kernel at each sample: exact (\d+)`)

// TestRecordKernelExact (done-means 1): at 20 kHz on kwalk_deep.py's
// 12-deep chain that changes every few µs, on every interpreter, ≥ 99 % of
// the samples carry the stack walked at the sample (exact), and every such
// stack — of the main thread and of a thread born during the recording —
// follows the target's call structure with each caller at its call's line.
func TestRecordKernelExact(t *testing.T) {
	requireKernelWalker(t)
	g := readDeepGraph(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "kwalk_deep.py")
			out := filepath.Join(t.TempDir(), "p.folded")
			cmd := exec.Command(testutil.Binary(t), "record", "-p", fmt.Sprint(tg.Pid), "-F", "20000", "-d", "2s",
				"--threads", "--engine", "bpf", "-o", out)
			go func() {
				time.Sleep(700 * time.Millisecond) // the walker is loaded: the late thread is born during the run
				_ = syscall.Kill(tg.Pid, syscall.SIGUSR1)
			}()
			r := testutil.RunCmd(t, 60*time.Second, cmd)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			m := exactRE.FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("footer does not say the stacks were walked in the kernel: %s", r.Stderr)
			}
			stacks, weights := readFoldedStacks(t, out)
			var total, exact, bad int64
			threads := map[string]bool{}
			var firstBad []string
			for i, st := range stacks {
				total += weights[i]
				thread, rest := st[0], st[1:]
				threads[thread] = true
				if len(rest) > 0 && strings.HasPrefix(rest[0], "[") {
					continue // a marker: truncated, faulted, no thread state, …
				}
				exact += weights[i]
				if why := g.check(rest, strings.HasPrefix(thread, "MainThread")); why != "" {
					bad += weights[i]
					if len(firstBad) < 5 {
						firstBad = append(firstBad, why+": "+strings.Join(st, ";"))
					}
				}
			}
			footerExact, _ := strconv.ParseInt(m[1], 10, 64)
			t.Logf("%s: %d samples, %d exact (footer %d), %d not following the call structure, threads %v\n%s",
				in.Label, total, exact, footerExact, bad, threads, r.Stderr)
			for _, b := range firstBad {
				t.Logf("  bad: %s", b)
			}
			if total < 2000 { // 0.1 s of the target's CPU (less on a loaded machine)
				t.Fatalf("only %d samples at 20 kHz in 2 s", total)
			}
			if footerExact != exact {
				t.Errorf("footer says exact %d, the profile has %d samples without a marker", footerExact, exact)
			}
			if got := float64(exact) / float64(total); got < 0.99 {
				t.Errorf("%.2f %% of %d samples exact, want ≥ 99 %%", 100*got, total)
			}
			if bad > 0 {
				t.Errorf("%d exact samples do not follow the target's call structure", bad)
			}
			late := false
			for th := range threads {
				late = late || strings.Contains(th, "late")
			}
			if !late {
				t.Errorf("no sample of the thread born during the recording (threads %v)", threads)
			}
		})
	}
}

// TestRecordKernelThreadPerRequest (done-means 2): a ThreadingHTTPServer
// whose every request runs on a new thread that lives a few ms, under a
// load generator on loopback: the recorded samples are ≥ 80 % of the
// target's CPU seconds (from /proc, over the recording) × F, and the
// handler's own loop is on top of ≥ 80 % of them.
func TestRecordKernelThreadPerRequest(t *testing.T) {
	requireKernelWalker(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			// ~10–20 ms of the handler's own loop per request (a thread
			// each): the server's per-request code (thread start, header
			// parsing) is then well under a fifth of the CPU on every build
			// (debian-3.11 once came to 21 % at 100000).
			tg := testutil.Start(t, in, "thread_per_request.py", "200000")
			var port string
			select {
			case port = <-tg.Lines:
			case <-time.After(10 * time.Second):
				t.Fatal("the server did not print its port")
			}
			url := "http://127.0.0.1:" + strings.TrimSpace(port) + "/"
			const freq = 2000
			cpu := func() float64 {
				st, err := procfs.Default().Stat(tg.Pid)
				if err != nil {
					t.Fatal(err)
				}
				return st.CPUSeconds()
			}
			out := filepath.Join(t.TempDir(), "p.folded")
			cmd := exec.Command(testutil.Binary(t), "record", "-p", fmt.Sprint(tg.Pid), "-F", fmt.Sprint(freq), "-d", "4s", "--format", "folded", "-o", out)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			cpu0 := cpu()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // loaded and sampling
			// The load: 3 clients, a new connection per request, for 2 s
			// or 3000 requests.
			var reqs, errs atomic.Int64
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			end := time.Now().Add(2 * time.Second)
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) && reqs.Load() < 3000 {
						resp, err := client.Get(url)
						if err != nil {
							errs.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						reqs.Add(1)
					}
				}()
			}
			wg.Wait()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("record: %v\n%s", err, stderr.String())
			}
			cpuS := cpu() - cpu0
			stacks, weights := readFoldedStacks(t, out)
			var total, handler int64
			leaves := map[string]int64{}
			for i, st := range stacks {
				total += weights[i]
				leaves[st[len(st)-1]] += weights[i]
				if m := labelRE.FindStringSubmatch(st[len(st)-1]); m != nil && strings.HasSuffix(m[1], "do_GET") &&
					filepath.Base(m[2]) == "thread_per_request.py" {
					handler += weights[i]
				}
			}
			want := 0.8 * cpuS * freq
			t.Logf("%s: %d requests (%d errors); target CPU %.3fs over the recording; %d samples (%.0f %% of CPU×F), handler on top of %d (%.1f %%)\n%s",
				in.Label, reqs.Load(), errs.Load(), cpuS, total, 100*float64(total)/(cpuS*freq), handler, 100*float64(handler)/float64(max(total, 1)), stderr.String())
			if !strings.Contains(stderr.String(), "bpf engine") {
				t.Fatalf("not recorded by the bpf engine: %s", stderr.String())
			}
			if reqs.Load() < 20 || cpuS < 0.1 { // 200 samples at least
				t.Fatalf("too little load: %d requests, %.3fs of target CPU", reqs.Load(), cpuS)
			}
			if float64(total) < want {
				t.Errorf("%d samples, want ≥ 80 %% of %.3f CPU-s × %d Hz = %.0f", total, cpuS, freq, want)
			}
			if handler*5 < total*4 {
				t.Errorf("handler on top of %d of %d samples, want ≥ 80 %%; by leaf: %v", handler, total, leaves)
			}
		})
	}
}

// TestRecordKernelRefusedFallsBack: without CAP_BPF and CAP_SYS_ADMIN
// (setpriv drops them from the bounding set) the kernel refuses the walker:
// auto says so in one stderr line naming the gate, records through the
// user-space reader and labels the path in the footer and the JSON;
// --engine bpf fails with the gate.
func TestRecordKernelRefusedFallsBack(t *testing.T) {
	requireKernelWalker(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv (util-linux) is not installed: can't drop CAP_BPF to provoke a refusal")
	}
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "busy.py")
	run := func(engine string) testutil.Result {
		return testutil.RunCmd(t, 60*time.Second, exec.Command(setpriv, "--bounding-set=-bpf,-sys_admin", testutil.Binary(t),
			"record", "-p", fmt.Sprint(tg.Pid), "-d", "800ms", "-F", "499", "--format", "json", "--engine", engine))
	}
	r := run("auto")
	if r.Code != 0 {
		t.Fatalf("auto without CAP_BPF: exit %d: %s", r.Code, r.Stderr)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(r.Stderr), "\n") {
		if strings.Contains(l, "walker unavailable") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "operation not permitted") || !strings.Contains(lines[0], "CAP_BPF no") ||
		!strings.Contains(lines[0], "using the perf engine") {
		t.Errorf("want one line saying why eBPF was refused and that perf is used:\n%s", r.Stderr)
	}
	if !strings.Contains(r.Stderr, "cpu mode (perf engine: stacks read from user space after the sample)") {
		t.Errorf("footer does not label the user-space path:\n%s", r.Stderr)
	}
	var doc struct {
		Meta struct {
			Engine, Fallback string
			Samples          uint64
			StackReads       uint64 `json:"stack_reads"`
		}
		Top []struct{ Stack string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, r.Stdout)
	}
	if doc.Meta.Engine != "perf" || !strings.Contains(doc.Meta.Fallback, "operation not permitted") || doc.Meta.Samples == 0 || doc.Meta.StackReads == 0 {
		t.Errorf("meta %+v: want engine perf, the fallback's reason, samples and stack reads", doc.Meta)
	}
	busy := false
	for _, st := range doc.Top {
		busy = busy || strings.Contains(st.Stack, "crunch (")
	}
	if !busy {
		t.Errorf("fallback profile lacks the busy thread: %+v", doc.Top)
	}
	r = run("bpf")
	if r.Code != exitPermission || !strings.Contains(r.Stderr, "CAP_BPF") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Errorf("--engine bpf without CAP_BPF: exit %d, want %d and one line naming CAP_BPF: %q", r.Code, exitPermission, r.Stderr)
	}
}
