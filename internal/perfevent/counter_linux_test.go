package perfevent

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// cpuTruth is the target's own clock: (monotonic, process_time) in seconds.
func cpuTruth(t *testing.T, tg *testutil.Target) (mono, cpu float64) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-tg.Lines:
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "T" {
				mono, _ = strconv.ParseFloat(f[1], 64)
				cpu, _ = strconv.ParseFloat(f[2], 64)
				if len(tg.Lines) == 0 {
					return mono, cpu
				}
			}
		case <-deadline:
			t.Fatal("the target stopped reporting its CPU time")
		}
	}
}

func drain(tg *testutil.Target) {
	for len(tg.Lines) > 0 {
		<-tg.Lines
	}
}

func tidsOf(t *testing.T, pid int) []int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		out = append(out, n)
	}
	return out
}

// TestPerfSoftwareCountersMatchTarget: task-clock over a window agrees with
// the CPU time the target measured itself (process_time), within 10 %;
// hardware events are either counted or "not supported" — never an error.
func TestPerfSoftwareCountersMatchTarget(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "cpu_burn.py")
	set, err := Open(tg.Pid, tidsOf(t, tg.Pid), DefaultGroups)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer set.Close()
	time.Sleep(200 * time.Millisecond)
	drain(tg)
	m0, c0 := cpuTruth(t, tg)
	r0, err := set.Read()
	if err != nil {
		t.Fatal(err)
	}
	// A window long enough for the target to burn 0.5 s of CPU: on a busy
	// machine (a shared CI runner) a second of wall time may give it less.
	var m1, c1 float64
	var r1 Reading
	for deadline := time.Now().Add(15 * time.Second); ; {
		time.Sleep(time.Second)
		drain(tg)
		m1, c1 = cpuTruth(t, tg)
		if r1, err = set.Read(); err != nil {
			t.Fatal(err)
		}
		if c1-c0 >= 0.5 || time.Now().After(deadline) {
			break
		}
	}
	w := Window(r0, r1)
	byName := map[string]Count{}
	for _, c := range w {
		byName[c.Event] = c
	}
	for _, name := range []string{"task-clock", "context-switches", "cpu-migrations", "page-faults"} {
		if c := byName[name]; !c.Supported {
			t.Errorf("%s not supported: %s", name, c.Reason)
		}
	}
	tc := byName["task-clock"].Scaled / 1e9
	truth := c1 - c0
	t.Logf("task-clock %.3f s over the window; target's process_time %.3f s over %.3f s wall", tc, truth, m1-m0)
	if truth < 0.5 {
		t.Fatalf("target burned only %.3f s", truth)
	}
	if math.Abs(tc-truth)/truth > 0.10 {
		t.Errorf("task-clock %.3f s vs target's own %.3f s: more than 10 %% apart", tc, truth)
	}
	for _, name := range []string{"cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses"} {
		c := byName[name]
		switch {
		case c.Supported && c.Raw == 0:
			t.Errorf("%s supported but counted 0 for a CPU-bound target", name)
		case !c.Supported && !strings.HasPrefix(c.Reason, "not supported"):
			t.Errorf("%s: reason %q, want \"not supported…\"", name, c.Reason)
		}
		t.Logf("%s: supported=%v raw=%d running %.0f%% %s", name, c.Supported, c.Raw, 100*c.RunningShare(), c.Reason)
	}
}

// TestPerfOverCommitted asks for more hardware events than a PMU holds (where
// there is one): some must be multiplexed, and say so; without a PMU every
// hardware event is "not supported".
func TestPerfOverCommitted(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "cpu_burn.py")
	var groups [][]Event
	for i := 0; i < 8; i++ {
		groups = append(groups, []Event{Cycles, Instructions}, []Event{Branches, BranchMisses})
	}
	set, err := Open(tg.Pid, tidsOf(t, tg.Pid), groups)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer set.Close()
	r0, _ := set.Read()
	time.Sleep(500 * time.Millisecond)
	r1, err := set.Read()
	if err != nil {
		t.Fatal(err)
	}
	w := Window(r0, r1)
	if !w[0].Supported {
		for _, c := range w {
			if c.Supported || !strings.HasPrefix(c.Reason, "not supported") {
				t.Errorf("no PMU, yet %s: supported=%v %q", c.Event, c.Supported, c.Reason)
			}
		}
		t.Logf("no hardware PMU here: every hardware event reports %q", w[0].Reason)
		return
	}
	est := 0
	for _, c := range w {
		if c.Estimate {
			est++
		}
	}
	if est == 0 {
		t.Errorf("32 hardware events and none multiplexed: %+v", w)
	}
}
