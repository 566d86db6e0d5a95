//go:build amd64

package kwalk_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

const target = "kwalk_deep.py"

// callGraph is the target's call structure, read from its source: the
// line range of every function, and for each "# calls NAME" line, its
// function and NAME.
type callGraph struct {
	funcs map[string][2]int // name -> first, last line
	calls map[int]call      // line -> call
}

type call struct{ caller, callee string }

func readGraph(t *testing.T) callGraph {
	t.Helper()
	path := filepath.Join(testutil.Repo(), "testdata", "targets", target)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := callGraph{funcs: map[string][2]int{}, calls: map[int]call{}}
	def := regexp.MustCompile(`^(?:async )?def (\w+)\(`)
	mark := regexp.MustCompile(`# calls (\w+)$`)
	cur := "<module>"
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
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
			g.calls[n] = call{caller: cur, callee: m[1]}
		}
	}
	return g
}

// check says why a symbolized stack (innermost first) is not one the
// target can have, or "".
func (g callGraph) check(fr []pyframes.Frame, mainThread bool) string {
	if !mainThread {
		own := false
		for _, f := range fr {
			own = own || filepath.Base(f.File) == target
		}
		if !own {
			return "" // a thread starting or ending: library code only, not checked
		}
	}
	// Frames of threading.py start the late thread: the outer region.
	n := len(fr)
	for n > 0 && strings.HasSuffix(fr[n-1].File, "threading.py") {
		n--
	}
	if n == 0 {
		if !mainThread {
			return "" // a thread still in threading's bootstrap
		}
		return "no frame of the target's own"
	}
	if fr[n-1].Function == "starter" && !mainThread && n < len(fr) {
		return "" // the thread that starts the late one: library code, not checked
	}
	for i := 0; i < n; i++ {
		f := fr[i]
		if filepath.Base(f.File) != target {
			return fmt.Sprintf("frame %d %s in %s", i, f.Function, f.File)
		}
		if i == 0 {
			r, ok := g.funcs[f.Function]
			if f.Function != "<module>" && (!ok || f.Line < r[0] || f.Line > r[1]) {
				return fmt.Sprintf("innermost %s at line %d: not in its function", f.Function, f.Line)
			}
			continue
		}
		c, ok := g.calls[f.Line]
		if !ok || c.caller != f.Function || c.callee != fr[i-1].Function {
			return fmt.Sprintf("frame %d %s line %d does not call %s", i, f.Function, f.Line, fr[i-1].Function)
		}
	}
	outer := fr[n-1].Function
	if mainThread && outer != "<module>" {
		return "main thread's outermost frame is " + outer
	}
	if !mainThread && (outer != "late" || n == len(fr)) {
		return "late thread's outermost frames are " + outer + " without threading's"
	}
	return ""
}

func stackString(fr []pyframes.Frame) string {
	var b strings.Builder
	for i := len(fr) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "%s (%s:%d);", fr[i].Function, filepath.Base(fr[i].File), fr[i].Line)
	}
	return b.String()
}

type run struct {
	samples, nopy, empty, complete, bad, symErr int
	maxDepth, frames                            int
	threads                                     map[int]int
	firstBad                                    []string
	cnt                                         kwalk.Counters
	runtime                                     time.Duration
	runs                                        uint64
	wall                                        time.Duration
	cpu                                         time.Duration // target on-CPU time over the window (schedstat)
	tls                                         []int64
	byTLS                                       int
	otherRun                                    time.Duration // program time per event on another task
	self                                        time.Duration // this process's CPU time reading and symbolizing
}

// sample runs the walker on a kwalk_deep target at freq Hz for at least
// d, and on until want samples of Python threads came (at most 8 s: the
// machine is shared).
func sample(t *testing.T, in testutil.Interp, freq int, clock kwalk.Clock, d time.Duration, want int, stats bool) run {
	t.Helper()
	tg := testutil.Start(t, in, target)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatalf("pyframes.Open: %v", err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatalf("KernelLayout: %v", err)
	}
	if stats {
		c, err := bpfload.EnableStats()
		if err != nil {
			testutil.Skip(t, fmt.Sprintf("bpf run-time stats (BPF_ENABLE_STATS): %v", err))
		}
		defer c.Close()
	}
	tls, err := p.TLSOffsets()
	if err != nil {
		t.Fatalf("TLSOffsets: %v", err)
	}
	w, err := kwalk.Open(tg.Pid, kl, kwalk.Options{Freq: freq, Clock: clock, TLS: tls})
	if errors.Is(err, kwalk.ErrUnavailable) {
		testutil.Skip(t, fmt.Sprintf("loading a perf_event eBPF program with bpf_loop: %v", err))
	}
	if err != nil {
		t.Fatalf("kwalk.Open: %v", err)
	}
	defer w.Close()
	refresh := func() {
		refs, err := p.ThreadRefs()
		if err == nil {
			err = w.SetThreads(refs)
		}
		if err != nil {
			t.Logf("refresh threads: %v", err)
		}
	}
	refresh()
	r := run{threads: map[int]int{}, tls: tls}
	sym := kwalk.NewSymbolizer(p, kl)
	g := readGraph(t)
	cpu0 := cpuNS(tg.Pid)
	self0 := selfCPU()
	if err := syscall.Kill(tg.Pid, syscall.SIGUSR1); err != nil { // the late thread, unknown to the map
		t.Fatal(err)
	}
	start := time.Now()
	lastRefresh := start
	w.SetDeadline(start.Add(d))
	for {
		s, err := w.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if r.samples-r.nopy-r.empty < want && time.Since(start) < 8*time.Second {
				w.SetDeadline(time.Now().Add(250 * time.Millisecond))
				continue
			}
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		r.samples++
		r.threads[s.Tid]++
		if s.Flags&kwalk.FlagByTLS != 0 {
			r.byTLS++
		}
		switch {
		case s.Flags&kwalk.FlagNoPython != 0:
			r.nopy++
			if len(tls) == 0 && time.Since(lastRefresh) > 20*time.Millisecond {
				refresh() // a thread born after the last look
				lastRefresh = time.Now()
			}
			continue
		case s.Flags&kwalk.FlagEmpty != 0:
			r.empty++
			continue
		}
		r.maxDepth = max(r.maxDepth, len(s.Frames))
		r.frames += len(s.Frames)
		if !s.Complete() {
			r.bad++
			if len(r.firstBad) < 5 {
				r.firstBad = append(r.firstBad, fmt.Sprintf("tid %d flags 0x%x depth %d hops %d last 0x%x", s.Tid, s.Flags, len(s.Frames), s.Hops, s.Last))
			}
			continue
		}
		fr, err := sym.Frames(&s)
		if err != nil {
			r.symErr++
			if len(r.firstBad) < 5 {
				r.firstBad = append(r.firstBad, "symbolize: "+err.Error())
			}
			continue
		}
		if why := g.check(fr, s.Tid == tg.Pid); why != "" {
			r.bad++
			if len(r.firstBad) < 5 {
				r.firstBad = append(r.firstBad, why+": "+stackString(fr))
			}
			continue
		}
		r.complete++
	}
	r.wall = time.Since(start)
	r.self = selfCPU() - self0
	r.cpu = time.Duration(cpuNS(tg.Pid) - cpu0)
	if r.cnt, err = w.Counters(); err != nil {
		t.Fatal(err)
	}
	if r.runtime, r.runs, err = w.RunStats(); err != nil {
		t.Fatal(err)
	}
	if stats {
		// The price of an event on another task: the same events for a
		// second with the target stopped.
		if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		rt, runs, err := w.RunStats()
		if err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(tg.Pid, syscall.SIGCONT)
		if runs > r.runs {
			r.otherRun = (rt - r.runtime) / time.Duration(runs-r.runs)
		}
	}
	w.Stop()
	t.Logf("%s: %d samples (threads %v) in %v, target on CPU %v (%s at %d Hz: %.0f%% of CPU×F); complete+checked %d, bad %d, symbolize errors %d, no tstate %d, empty %d, by TLS %d (offsets %v), deepest %d; kernel %+v; symbolizer %+v",
		in.Label, r.samples, r.threads, r.wall.Round(time.Millisecond), r.cpu.Round(time.Millisecond), clock, freq,
		100*float64(r.samples)/(r.cpu.Seconds()*float64(freq)), r.complete, r.bad, r.symErr, r.nopy, r.empty, r.byTLS, tls, r.maxDepth, r.cnt, sym.Stats)
	t.Logf("observer (ring read, decode, symbolize, check): %v of CPU, %v per sample", r.self.Round(time.Millisecond), r.self/time.Duration(max(r.samples, 1)))
	for _, b := range r.firstBad {
		t.Logf("  not good: %s", b)
	}
	return r
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuNS is the on-CPU time of every live thread of pid (schedstat, ns).
func cpuNS(pid int) uint64 {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var sum uint64
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue
		}
		var ns uint64
		fmt.Sscan(string(b), &ns)
		sum += ns
	}
	return sum
}

// TestKernelWalk: at a high rate, on every interpreter, ≥ 99 % of the
// samples of Python threads are complete walks whose symbolized stacks are
// stacks the target can have (every caller's line is its call's line,
// every stack starts at the thread's entry).
func TestKernelWalk(t *testing.T) {
	testutil.RequireRoot(t)
	// 3.13t too: no thread-local bytecode, its own object header.
	for _, in := range append(testutil.Interpreters(t), testutil.FreeThreadedInterpreters(t)...) {
		t.Run(in.Label, func(t *testing.T) {
			r := sample(t, in, 10000, kwalk.TaskClock, 1500*time.Millisecond, 3000, false)
			walked := r.samples - r.nopy - r.empty
			if walked < 1000 { // 0.1 s of the target's CPU
				t.Fatalf("only %d samples with a Python thread state", walked)
			}
			if got := float64(r.complete) / float64(walked); got < 0.99 {
				t.Errorf("%.2f%% of %d samples are complete and valid, want ≥ 99%%", 100*got, walked)
			}
			if r.maxDepth < 14 {
				t.Errorf("deepest stack %d frames, the target's is 14 (module, run, f1..f12)", r.maxDepth)
			}
			if len(r.threads) < 2 {
				t.Errorf("samples of %d threads, want the main thread and the one born during the run", len(r.threads))
			}
			if r.nopy*50 > r.samples {
				t.Errorf("%d of %d samples found no thread state", r.nopy, r.samples)
			}
			// The late thread is born after the map was filled: with TLS
			// offsets the kernel finds its thread state by itself.
			if len(r.tls) > 0 && r.byTLS == 0 {
				t.Errorf("TLS offsets %v found, yet no sample found its thread state through them", r.tls)
			}
		})
	}
}

// TestKernelWalkCost measures the program's run time per sample from the
// kernel's bpf stats at 20 kHz, for task-clock and cpu-clock events, and
// how many samples each clock delivers against the target's CPU time.
func TestKernelWalkCost(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Label != "pyenv-3.13" && in.Label != "sid-3.15" && in.Label != "pyenv-3.10" {
			continue
		}
		for _, clock := range []kwalk.Clock{kwalk.TaskClock, kwalk.CPUClock} {
			t.Run(in.Label+"/"+clock.String(), func(t *testing.T) {
				r := sample(t, in, 20000, clock, 1500*time.Millisecond, 5000, true)
				if r.runs == 0 {
					testutil.Skip(t, "bpf stats report no runs (BPF_ENABLE_STATS without effect)")
				}
				target := r.cnt[kwalk.CSamples]
				if target == 0 || target > r.runs {
					t.Fatalf("%d target samples in %d runs", target, r.runs)
				}
				// Program time of the target's samples: the total less the
				// other tasks' events at their measured price.
				perSample := (r.runtime - time.Duration(r.runs-target)*r.otherRun) / time.Duration(target)
				t.Logf("%s %s 20 kHz: bpf run time %v over %d runs; %d target samples (walked %d, %.1f frames on average): %v per target sample, %v per event on another task; %.0f%% of the target's CPU×F",
					in.Label, clock, r.runtime, r.runs, target, r.cnt[kwalk.CWalked], float64(r.frames)/float64(max(r.samples-r.nopy-r.empty, 1)),
					perSample, r.otherRun, 100*float64(target)/(r.cpu.Seconds()*20000))
				if perSample > 100*time.Microsecond {
					t.Errorf("%v of bpf run time per target sample", perSample)
				}
			})
		}
	}
}

// TestKernelWalkTruncates: a stack deeper than MaxFrames comes out
// flagged truncated with MaxFrames frames, never as a complete stack.
func TestKernelWalkTruncates(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			wk := startWalking(t, in, 2000, nil, target, "deep", "200")
			tg, w := wk.tg, wk.w
			var deep, truncated, complete int
			start := time.Now()
			w.SetDeadline(start.Add(500 * time.Millisecond))
			for {
				s, err := w.Read()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					if deep < 200 && time.Since(start) < 8*time.Second {
						w.SetDeadline(time.Now().Add(250 * time.Millisecond))
						continue
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if s.Tid != tg.Pid || s.Flags&(kwalk.FlagNoPython|kwalk.FlagEmpty) != 0 {
					continue
				}
				deep++
				if s.Complete() {
					complete++
				}
				if s.Flags&kwalk.FlagTruncated != 0 && len(s.Frames) == kwalk.MaxFrames {
					truncated++
				}
			}
			cnt, _ := w.Counters()
			t.Logf("%s: %d samples of the 202-deep thread, %d truncated at %d frames, %d complete; kernel %+v", in.Label, deep, truncated, kwalk.MaxFrames, complete, cnt)
			if deep < 50 {
				t.Fatalf("only %d samples of the deep thread", deep)
			}
			if complete > 0 || truncated*100 < deep*99 {
				t.Errorf("%d of %d samples truncated at %d frames, %d complete: want all truncated", truncated, deep, kwalk.MaxFrames, complete)
			}
		})
	}
}

// TestKernelWalkCostByDepth: program time per sample of a thread spinning
// 12 and 122 frames deep (bpf stats, 20 kHz): the fixed and per-frame price.
func TestKernelWalkCostByDepth(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Label != "pyenv-3.13" && in.Label != "sid-3.15" {
			continue
		}
		for _, depth := range []string{"10", "120"} {
			t.Run(in.Label+"/"+depth, func(t *testing.T) {
				wk := startWalking(t, in, 20000, func() {
					st, err := bpfload.EnableStats()
					if err != nil {
						testutil.Skip(t, fmt.Sprintf("bpf run-time stats (BPF_ENABLE_STATS): %v", err))
					}
					t.Cleanup(func() { st.Close() })
				}, target, "deep", depth)
				tg, w := wk.tg, wk.w
				w.SetDeadline(time.Now().Add(1500 * time.Millisecond))
				n, frames := 0, 0
				for {
					s, err := w.Read()
					if err != nil {
						break
					}
					if s.Tid == tg.Pid {
						n++
						frames += len(s.Frames)
					}
				}
				rt, runs, err := w.RunStats()
				if err != nil {
					t.Fatal(err)
				}
				cnt, err := w.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				rt2, runs2, _ := w.RunStats()
				_ = syscall.Kill(tg.Pid, syscall.SIGCONT)
				target := cnt[kwalk.CSamples]
				if n == 0 || target == 0 || runs2 <= runs || target > runs {
					t.Fatalf("%d samples, %d target events, runs %d then %d", n, target, runs, runs2)
				}
				other := (rt2 - rt) / time.Duration(runs2-runs)
				per := (rt - time.Duration(runs-target)*other) / time.Duration(target)
				t.Logf("%s, %.1f frames: %v of program time per target sample (%d samples), %v per event on another task", in.Label, float64(frames)/float64(n), per, target, other)
			})
		}
	}
}
