package record

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/testutil"
)

type spentReport struct {
	Heavy    float64   `json:"heavy"`
	Light    float64   `json:"light"`
	RestWall float64   `json:"rest_wall"`
	BusyWall float64   `json:"busy_wall"`
	Work     []float64 `json:"work"`
}

// recordTarget starts cpu_split.py, records it until it exits, and returns
// the profile and the target's own account of where its time went.
func recordTarget(t *testing.T, in testutil.Interp, mode string, freq int, args ...string) (*flame.Profile, spentReport) {
	t.Helper()
	script := filepath.Join(testutil.Repo(), "testdata/targets/cpu_split.py")
	tg := testutil.StartArgv(t, append(append(append([]string{}, in.Argv...), script), args...), 30*time.Second)
	s, err := session.Attach(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := Run(context.Background(), s, Options{Mode: mode, Freq: freq, Duration: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var rep spentReport
	select {
	case line := <-tg.Lines:
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("target report %q: %v", line, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("target did not report")
	}
	return prof, rep
}

// share returns the fraction of the profile's weight whose stack contains a
// Python frame of function fn (each stack counted once).
func share(p *flame.Profile, match func(flame.Frame) bool) float64 {
	var in, total int64
	for _, s := range p.Stacks() {
		total += s.Weight
		for _, id := range s.Frames {
			if match(p.Frame(id)) {
				in += s.Weight
				break
			}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(in) / float64(total)
}

func fn(name string) func(flame.Frame) bool {
	return func(f flame.Frame) bool { return f.Kind == flame.Python && f.Function == name }
}

// TestRecordCPUSplit: CPU samples split between heavy() and light() as the
// target's own thread_time measured them, within 3 points; the sleeping
// function gets ~0 % in cpu mode and ~50 % in wall mode.
func TestRecordCPUSplit(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.11", "pyenv-3.13", "sid-3.14", "pyenv-3.10", "sid-3.15"} {
		t.Run(label, func(t *testing.T) {
			in := testutil.Find(t, label)
			prof, rep := recordTarget(t, in, "cpu", 999, "10", "100")
			want := rep.Heavy / (rep.Heavy + rep.Light)
			h, l, r := share(prof, fn("heavy")), share(prof, fn("light")), share(prof, fn("rest"))
			got := h / (h + l)
			t.Logf("cpu: %d samples at %.0f Hz achieved; heavy %.3f light %.3f rest %.3f; heavy/(heavy+light) %.3f, target measured %.3f; torn %d failed %d lost %d",
				prof.Meta.Samples, prof.Meta.AchievedHz, h, l, r, got, want, prof.Meta.Torn, prof.Meta.Failed, prof.Meta.Lost)
			if prof.Meta.Samples < 500 {
				t.Fatalf("only %d samples", prof.Meta.Samples)
			}
			if d := got - want; d > 0.03 || d < -0.03 {
				t.Errorf("heavy share %.3f, target measured %.3f (more than 3 points apart)", got, want)
			}
			if r > 0.02 {
				t.Errorf("the sleeping function has %.1f %% of CPU samples", 100*r)
			}
			if h+l < 0.9 {
				t.Errorf("heavy+light are only %.2f of the samples", h+l)
			}
		})
	}
	t.Run("wall/pyenv-3.12", func(t *testing.T) {
		in := testutil.Find(t, "pyenv-3.12")
		prof, rep := recordTarget(t, in, "wall", 199, "10", "100")
		h, l, r := share(prof, fn("heavy")), share(prof, fn("light")), share(prof, fn("rest"))
		want := rep.RestWall / (rep.RestWall + rep.BusyWall)
		t.Logf("wall: %d samples; heavy %.3f light %.3f rest %.3f (target: rest %.3f of its time)", prof.Meta.Samples, h, l, r, want)
		if d := r/(h+l+r) - want; d > 0.05 || d < -0.05 {
			t.Errorf("rest share %.3f of (heavy+light+rest), target measured %.3f", r/(h+l+r), want)
		}
	})
}

// TestRecordCallerLines: work() called from three lines of caller() is split
// by the caller's line, in the proportions the target measured (3:2:1).
func TestRecordCallerLines(t *testing.T) {
	testutil.RequireRoot(t)
	script := filepath.Join(testutil.Repo(), "testdata/targets/cpu_split.py")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	lineOf := map[string]int{}
	for i, l := range strings.Split(string(src), "\n") {
		for _, m := range []string{"call-A", "call-B", "call-C"} {
			if strings.Contains(l, "# "+m) {
				lineOf[m] = i + 1
			}
		}
	}
	for _, label := range []string{"pyenv-3.11", "pyenv-3.12", "sid-3.14"} {
		t.Run(label, func(t *testing.T) {
			prof, rep := recordTarget(t, testutil.Find(t, label), "cpu", 999, "10", "100", "callers")
			var tot float64
			for _, w := range rep.Work {
				tot += w
			}
			var shares []float64
			for i, m := range []string{"call-A", "call-B", "call-C"} {
				line := lineOf[m]
				sh := share(prof, func(f flame.Frame) bool { return f.Function == "caller" && f.Line == line })
				shares = append(shares, sh)
				want := rep.Work[i] / tot
				if d := sh - want; d > 0.04 || d < -0.04 {
					t.Errorf("%s (line %d): %.3f of samples, target measured %.3f", m, line, sh, want)
				}
			}
			other := 0.0
			for _, s := range prof.Stacks() {
				for _, id := range s.Frames {
					f := prof.Frame(id)
					if f.Function == "caller" && f.Line != lineOf["call-A"] && f.Line != lineOf["call-B"] && f.Line != lineOf["call-C"] {
						other += float64(s.Weight)
					}
				}
			}
			if other/float64(prof.Total()) > 0.02 {
				t.Errorf("%.1f %% of samples put caller() on a line that has no call", 100*other/float64(prof.Total()))
			}
			t.Logf("shares by caller line %v (lines %v)", shares, lineOf)
		})
	}
}

var _ = fmt.Sprint

// TestRecordThreads: two CPU-bound threads get about half of the samples
// each (of the samples that are theirs); idle threads get none; threads
// created during the recording are sampled while they live.
func TestRecordThreads(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.12", "pyenv-3.10"} {
		t.Run(label, func(t *testing.T) {
			in := testutil.Find(t, label)
			script := filepath.Join(testutil.Repo(), "testdata/targets/threads_cpu.py")
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script, "3"), 30*time.Second)
			s, err := session.Attach(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			prof, err := Run(context.Background(), s, Options{Mode: "cpu", Freq: 499, Threads: true, Duration: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			byThread := map[string]int64{}
			for _, st := range prof.Stacks() {
				f := prof.Frame(st.Frames[0])
				if f.Kind != flame.Thread {
					t.Fatalf("stack not rooted at a thread: %s", prof.FoldedKey(st))
				}
				name := f.Function
				if i := strings.Index(name, " ("); i > 0 {
					name = name[:i]
				}
				if strings.HasPrefix(name, "brief-") {
					name = "brief"
				}
				byThread[name] += st.Weight
			}
			a, b := byThread["spin-a"], byThread["spin-b"]
			t.Logf("samples by thread: %v (total %d, torn %d, achieved %.0f Hz, %.1fs, lost %d throttled %d)", byThread, prof.Meta.Samples, prof.Meta.Torn, prof.Meta.AchievedHz, prof.Meta.DurationS, prof.Meta.Lost, prof.Meta.Throttled)
			if a == 0 || b == 0 {
				t.Fatalf("a CPU-bound thread has no samples: %v", byThread)
			}
			if r := float64(a) / float64(a+b); r < 0.4 || r > 0.6 {
				t.Errorf("spin-a has %.2f of the two spinners' samples, want about 0.5", r)
			}
			if byThread["idle-1"]+byThread["idle-2"] > (a+b)/20 { // they wake 20 times a second: real, small CPU
				t.Errorf("idle threads have %d samples", byThread["idle-1"]+byThread["idle-2"])
			}
			if byThread["brief"] < (a+b)/20 {
				t.Errorf("short-lived threads have only %d samples (spinners %d)", byThread["brief"], a+b)
			}
		})
	}
}
