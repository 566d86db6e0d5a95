package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/diagnose"
	"github.com/pyobs/pyobs/internal/testutil"
)

// diagnoseRun runs pyobs diagnose --format json on pid for d and checks
// what every report must have: a progress line per phase that ran, the
// whole run within d, each phase's price (mechanism, duration, observer
// CPU), and the total as their sum.
func diagnoseRun(t *testing.T, pid int, d time.Duration) *diagnose.Report {
	t.Helper()
	r := testutil.Run(t, d+30*time.Second, "diagnose", "--format", "json", "-p", fmt.Sprint(pid), "-d", d.String())
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s\nstderr: %s", err, r.Stdout, r.Stderr)
	}
	t.Logf("verdict %s: %s\nstderr:\n%s", rep.Verdict, rep.Decision, r.Stderr)
	if rep.Schema != 1 || rep.Pid != pid || !rep.Complete {
		t.Errorf("schema %d pid %d complete %v", rep.Schema, rep.Pid, rep.Complete)
	}
	if rep.ElapsedS > d.Seconds()+0.5 {
		t.Errorf("the run took %.2f s of a %s budget", rep.ElapsedS, d)
	}
	sum := 0.0
	for _, p := range rep.Phases {
		t.Logf("phase %s: %s, %.2f s, observer CPU %.4f s", p.Name, p.Mechanism, p.DurationS, p.ObserverCPUS)
		if p.Mechanism == "" || p.Price == "" || p.DurationS <= 0 || p.ObserverCPUS <= 0 || p.Error != "" {
			t.Errorf("phase %+v: its price is not stated", p)
		}
		if p.TargetStoppedS != 0 {
			t.Errorf("phase %s stopped the target %.6f s", p.Name, p.TargetStoppedS)
		}
		if !strings.Contains(r.Stderr, "pyobs diagnose: phase ") || !strings.Contains(r.Stderr, " "+p.Name+": ") {
			t.Errorf("no progress line for phase %s: %s", p.Name, r.Stderr)
		}
		sum += p.ObserverCPUS
	}
	if diff := sum - rep.Total.ObserverCPUS; diff > 1e-3 || diff < -1e-3 {
		t.Errorf("total observer CPU %.4f s, phases sum to %.4f s", rep.Total.ObserverCPUS, sum)
	}
	if len(rep.Findings) == 0 || rep.Findings[0].Kind != rep.Verdict || rep.Findings[0].Command == "" {
		t.Errorf("first finding %+v: want the verdict with its command", rep.Findings)
	}
	return &rep
}

// favour moves pid into a cgroup of its own with the largest CPU weight
// (v1 cpu.shares, else v2 cpu.weight), no quota: the machine is shared,
// and without it other sessions' work queues the target (the run queue is
// one of the things a diagnosis decides on). Autogroups make nice useless.
func favour(t *testing.T, pid int) {
	t.Helper()
	name := fmt.Sprintf("pyobs-diag-%d", pid)
	for _, c := range []struct{ root, file, value string }{
		{"/sys/fs/cgroup/cpu,cpuacct", "cpu.shares", "262144"},
		{"/sys/fs/cgroup/cpu", "cpu.shares", "262144"},
		{"/sys/fs/cgroup", "cpu.weight", "10000"},
	} {
		if _, err := os.Stat(filepath.Join(c.root, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		cleanupCgroup(t, dir, filepath.Join(c.root, "cgroup.procs"))
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(c.value), 0); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0); err != nil {
			t.Fatalf("can't move pid %d into %s: %v", pid, dir, err)
		}
		return
	}
	t.Logf("no cgroup to favour pid %d in: it shares the CPUs with everything else", pid)
}

func phaseRan(rep *diagnose.Report, name string) bool {
	for _, p := range rep.Phases {
		if p.Name == name {
			return true
		}
	}
	return false
}

func ruledOut(t *testing.T, rep *diagnose.Report, what string, want ...string) {
	t.Helper()
	for _, r := range rep.RuledOut {
		if r.What == what {
			for _, w := range want {
				if !strings.Contains(r.Evidence, w) {
					t.Errorf("ruled out %s: %q lacks %q", what, r.Evidence, w)
				}
			}
			return
		}
	}
	t.Errorf("%s not ruled out: %+v", what, rep.RuledOut)
}

// TestDiagnoseOnCPU (done-means 1 and 6): a CPU-bound target → on-cpu,
// its hot function first, throttling and the run queue ruled out with
// their numbers, no off-CPU phase; every phase's price in the report.
func TestDiagnoseOnCPU(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.13"), "diagnose_cpu.py")
	favour(t, tg.Pid)
	rep := diagnoseRun(t, tg.Pid, 8*time.Second)
	if rep.Verdict != diagnose.VerdictOnCPU {
		t.Fatalf("verdict %s, want on-cpu: %s", rep.Verdict, rep.Decision)
	}
	if len(rep.Hottest) == 0 || rep.Hottest[0].Function != "hot_loop" || rep.Hottest[0].Percent < 50 || !strings.HasSuffix(rep.Hottest[0].File, "diagnose_cpu.py") {
		t.Errorf("hottest %+v: want hot_loop first", rep.Hottest)
	}
	ruledOut(t, rep, "cpu-throttling", "nr_throttled", "periods")
	ruledOut(t, rep, "run-queue", "waited", "s for a CPU", "%")
	if !phaseRan(rep, diagnose.PhaseCount) || !phaseRan(rep, diagnose.PhaseCPU) || phaseRan(rep, diagnose.PhaseOffCPU) || phaseRan(rep, diagnose.PhaseTrace) {
		t.Errorf("phases %+v: want count and on-cpu, no off-cpu or trace", rep.Phases)
	}
	if len(rep.Hottest) > 0 && rep.Hottest[0].Samples == 0 {
		t.Errorf("samples %d", rep.Hottest[0].Samples)
	}
}

// TestDiagnoseLock (done-means 2): one thread holds a lock 90 % of the
// time → off-cpu, the waiting function and class lock first in the waits,
// the holder named as their waker; no CPU phase.
func TestDiagnoseLock(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.13"), "diagnose_lock.py")
	favour(t, tg.Pid)
	rep := diagnoseRun(t, tg.Pid, 10*time.Second)
	if rep.Verdict != diagnose.VerdictOffCPU {
		t.Fatalf("verdict %s, want off-cpu: %s", rep.Verdict, rep.Decision)
	}
	if len(rep.Waits) == 0 {
		t.Fatal("no waits")
	}
	w := rep.Waits[0]
	if w.Class != "lock" || w.Function != "wait_for_lock" || w.Line == 0 || !strings.HasPrefix(w.Waker, "holder (") {
		t.Errorf("first wait %+v: want lock in wait_for_lock, woken by holder", w)
	}
	if phaseRan(rep, diagnose.PhaseCPU) || phaseRan(rep, diagnose.PhaseTrace) {
		t.Errorf("phases %+v: no CPU phase and no trace (a lock is not traced)", rep.Phases)
	}
	ruledOut(t, rep, "on-cpu work", "cores used")
}

// TestDiagnoseSleepSelect: CPython 3.10 sleeps in pselect6 on no
// descriptor; the diagnosis must see a sleep (not traced: nothing there
// to time), not a network wait with a trace of the network calls.
func TestDiagnoseSleepSelect(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.10"), "sleeper.py", "--nap", "0.02")
	favour(t, tg.Pid)
	rep := diagnoseRun(t, tg.Pid, 6*time.Second)
	if rep.Verdict != diagnose.VerdictOffCPU {
		t.Fatalf("verdict %s, want off-cpu: %s", rep.Verdict, rep.Decision)
	}
	if len(rep.Waits) == 0 || rep.Waits[0].Class != "sleep" || rep.Waits[0].Function != "<module>" {
		t.Errorf("waits %+v: want sleep in <module> first", rep.Waits)
	}
	for _, w := range rep.Waits {
		if w.Class == "network/poll" {
			t.Errorf("wait %+v: the target has no network wait", w)
		}
	}
	if phaseRan(rep, diagnose.PhaseTrace) || rep.Hypothesis != "" {
		t.Errorf("phases %+v, hypothesis %q: want no trace (a sleep is not traced)", rep.Phases, rep.Hypothesis)
	}
}

// TestDiagnoseThrottled (done-means 3): a burner in a cgroup with a 20 %
// CPU quota → cpu-throttled with nr_throttled and the throttled time, and
// the procedure stops there: no sampling, no off-CPU, no trace.
func TestDiagnoseThrottled(t *testing.T) {
	testutil.RequireRoot(t)
	dir, procs := makeQuotaCgroup(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.12"), "cpu_burn.py")
	if err := os.WriteFile(procs, []byte(fmt.Sprint(tg.Pid)), 0); err != nil {
		t.Fatalf("can't move pid %d into %s: %v", tg.Pid, dir, err)
	}
	time.Sleep(300 * time.Millisecond)
	rep := diagnoseRun(t, tg.Pid, 4*time.Second)
	if rep.Verdict != diagnose.VerdictThrottled {
		t.Fatalf("verdict %s, want cpu-throttled: %s", rep.Verdict, rep.Decision)
	}
	ev := rep.Findings[0].Evidence
	if n, _ := ev["nr_throttled"].(float64); n <= 0 {
		t.Errorf("evidence %v: nr_throttled", ev)
	}
	if s, _ := ev["throttled_s"].(float64); s <= 0 {
		t.Errorf("evidence %v: throttled_s", ev)
	}
	for _, p := range []string{diagnose.PhaseCPU, diagnose.PhaseOffCPU, diagnose.PhaseTrace} {
		if phaseRan(rep, p) {
			t.Errorf("phase %s ran after the throttling finding", p)
		}
	}
	stops := false
	for _, s := range rep.Skipped {
		stops = stops || (s.Phase == diagnose.PhaseCPU && strings.Contains(s.Why, "stops"))
	}
	if !stops {
		t.Errorf("skipped %+v: the report does not say the procedure stopped", rep.Skipped)
	}
}

// TestDiagnosePipe (done-means 4): a thread blocked reading a pipe →
// off-cpu, class pipe, the Python line, and a narrow trace of read in
// phase 4 naming the same site.
func TestDiagnosePipe(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.13"), "diagnose_pipe.py")
	favour(t, tg.Pid)
	rep := diagnoseRun(t, tg.Pid, 10*time.Second)
	if rep.Verdict != diagnose.VerdictOffCPU {
		t.Fatalf("verdict %s, want off-cpu: %s", rep.Verdict, rep.Decision)
	}
	if len(rep.Waits) == 0 || !strings.HasPrefix(rep.Waits[0].Class, "pipe") || rep.Waits[0].Function != "read_pipe" || rep.Waits[0].Line != 17 {
		t.Fatalf("waits %+v: want pipe in read_pipe (diagnose_pipe.py:17) first", rep.Waits)
	}
	var trace *diagnose.Phase
	for i, p := range rep.Phases {
		if p.Name == diagnose.PhaseTrace {
			trace = &rep.Phases[i]
		}
	}
	if trace == nil || !strings.Contains(trace.Mechanism, "-e read,") {
		t.Fatalf("phases %+v skipped %+v: want a narrow trace of read", rep.Phases, rep.Skipped)
	}
	if !strings.Contains(rep.Hypothesis, "read_pipe") {
		t.Errorf("hypothesis %q", rep.Hypothesis)
	}
	found := false
	for _, s := range rep.Syscalls {
		found = found || (s.Name == "read" && s.Calls > 0 && strings.Contains(s.Site, "read_pipe (") && strings.HasSuffix(s.Site, "diagnose_pipe.py:17)"))
	}
	if !found {
		t.Errorf("syscalls %+v: want read at read_pipe (diagnose_pipe.py:17)", rep.Syscalls)
	}
}

// TestDiagnoseHTML (done-means 5): on a target both on and off CPU
// (verdict mixed) the HTML report opens in headless Chromium with no
// script error, every section present and both flame graphs drawn and
// live (their script ran: frames and a status line).
func TestDiagnoseHTML(t *testing.T) {
	testutil.RequireRoot(t)
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		testutil.Skip(t, "no chromium to open the report in (Debian: apt-get install -y chromium)")
	}
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.13"), "diagnose_lock.py", "mixed")
	favour(t, tg.Pid)
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	r := testutil.Run(t, 40*time.Second, "diagnose", "-p", fmt.Sprint(tg.Pid), "-d", "10s", "-o", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).Find(page); m != nil {
		t.Errorf("the page loads an external resource: %s", m)
	}
	// The probe runs after the page is parsed and writes what it sees
	// into the DOM, which --dump-dom prints.
	probe := `<script>
var out = {errors: window.__e || [], sections: [], flames: []};
document.querySelectorAll('section').forEach(function (s) { out.sections.push(s.id); });
document.querySelectorAll('svg.pyobs-flame').forEach(function (svg) {
  var st = svg.querySelector('.status');
  out.flames.push({section: svg.closest('section').id, frames: svg.querySelectorAll('g.frame').length, status: st ? st.textContent : ''});
});
out.verdict = document.querySelector('#verdict .verdict').textContent;
var p = document.createElement('pre'); p.id = 'probe'; p.textContent = encodeURIComponent(JSON.stringify(out)); document.body.appendChild(p);
</script>`
	doc := strings.Replace(string(page), "<head>", "<head><script>window.__e=[];window.addEventListener('error',function(e){window.__e.push(String(e.message))});</script>", 1)
	doc = strings.Replace(doc, "</body>", probe+"</body>", 1)
	probed := filepath.Join(dir, "probed.html")
	if err := os.WriteFile(probed, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	js := testutil.ChromiumResult(t, bin, probed, "probe")
	var res struct {
		Errors, Sections []string
		Verdict          string
		Flames           []struct {
			Section, Status string
			Frames          int
		}
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	t.Logf("%s", js)
	if len(res.Errors) > 0 {
		t.Errorf("script errors: %v", res.Errors)
	}
	if res.Verdict != diagnose.VerdictMixed {
		t.Errorf("verdict %q, want mixed (stderr %s)", res.Verdict, r.Stderr)
	}
	want := []string{"verdict", "findings", "ruled-out", "counters", "hottest", "waits", "trace", "threads", "price", "flame-cpu", "flame-offcpu"}
	if strings.Join(res.Sections, ",") != strings.Join(want, ",") {
		t.Errorf("sections %v, want %v", res.Sections, want)
	}
	got := map[string]bool{}
	for _, f := range res.Flames {
		if f.Frames == 0 || f.Status == "" {
			t.Errorf("flame graph %+v: no frames or no status line (its script did not run)", f)
		}
		got[f.Section] = true
	}
	if !got["flame-cpu"] || !got["flame-offcpu"] {
		t.Errorf("flame graphs %+v: want the on-CPU and the off-CPU one", res.Flames)
	}
}

// TestDiagnoseInterrupt: Ctrl-C during the sampling phase writes the
// report of the phases done, marked incomplete with the signal named
// (a SIGTERM was once called Ctrl-C), and exits 0.
func TestDiagnoseInterrupt(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, testutil.Find(t, "pyenv-3.13"), "diagnose_cpu.py")
	favour(t, tg.Pid)
	cmd := exec.Command(testutil.Binary(t), "diagnose", "--format", "json", "-p", fmt.Sprint(tg.Pid), "-d", "30s")
	go func() {
		time.Sleep(5 * time.Second) // counting takes 3 s of the 30
		_ = cmd.Process.Signal(syscall.SIGINT)
	}()
	start := time.Now()
	r := testutil.RunCmd(t, 30*time.Second, cmd)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.Stdout)
	}
	if rep.Complete || !strings.Contains(rep.Interrupt, "interrupted by SIGINT") || time.Since(start) > 10*time.Second {
		t.Errorf("complete %v interrupt %q after %v", rep.Complete, rep.Interrupt, time.Since(start))
	}
	if !phaseRan(&rep, diagnose.PhaseCount) || !phaseRan(&rep, diagnose.PhaseCPU) || len(rep.Hottest) == 0 || rep.Verdict != diagnose.VerdictOnCPU {
		t.Errorf("phases %+v hottest %+v verdict %s: want counting and the sampling done so far", rep.Phases, rep.Hottest, rep.Verdict)
	}
}

// TestDiagnoseUsage: bad flags are one line and exit 2.
func TestDiagnoseUsage(t *testing.T) {
	oneLineError(t, testutil.Run(t, 10*time.Second, "diagnose", "-p", "1", "-d", "1s"), exitUsage, "-d")
	oneLineError(t, testutil.Run(t, 10*time.Second, "diagnose", "-p", "1", "--format", "svg"), exitUsage, "--format")
	oneLineError(t, testutil.Run(t, 10*time.Second, "diagnose"), exitUsage, "no target")
}

// TestDiagnoseSpawn: -- CMD is diagnosed within -d, the report written,
// then the program runs to its end and its exit status is passed on.
func TestDiagnoseSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.13")
	argv := append([]string{"diagnose", "-d", "3s", "--"}, in.Argv...)
	argv = append(argv, filepath.Join(testutil.Repo(), "testdata", "targets", "cpu_burn.py"), "--seconds", "4", "--exit", "3")
	r := testutil.Run(t, 30*time.Second, argv...)
	if r.Code != 3 {
		t.Errorf("exit %d, want the program's 3: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "pyobs diagnose: pid ") || !strings.Contains(r.Stdout, "\nVerdict: ") || !strings.Contains(r.Stderr, "pyobs diagnose: phase 1 count") {
		t.Errorf("no report:\nstdout %s\nstderr %s", r.Stdout, r.Stderr)
	}
}
