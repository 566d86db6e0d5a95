// Package testutil holds what the real-target tests share: the interpreter
// manifest written by scripts/pythons.sh, spawning targets that report
// their own truth, building the pyobs binary, and skips that name the
// missing capability (and fail instead under CI=true).
package testutil

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
)

// InCI is true when the CI runner set CI=true: a skip there is a failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// Skip skips with the reason, or fails under CI, where the machine is
// expected to have every capability the tests use.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and this capability is missing: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (fails in CI) unless we run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (CAP_SYS_PTRACE over targets of other users, ptrace of children is not enough)")
	}
}

// Interp is one line of the manifest.
type Interp struct {
	Label   string // pyenv-3.12, debian-3.11, sid-3.14, …
	Version string // X.Y.Z
	Argv    []string
}

// Minor returns Y of X.Y.Z.
func (i Interp) Minor() int {
	var maj, min int
	fmt.Sscanf(i.Version, "%d.%d", &maj, &min)
	return min
}

// FreeThreaded reports whether this is a free-threaded build (label ft-3.Xt,
// built by scripts/pythons.sh with --disable-gil).
func (i Interp) FreeThreaded() bool { return strings.HasPrefix(i.Label, "ft-") }

// Expected is every interpreter the tests must cover on this machine kind.
var Expected = []string{"pyenv-3.10", "pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "debian-3.11", "sid-3.14", "sid-3.15"}

// ExpectedFreeThreaded: the tests must cover at least one of these
// (scripts/pythons.sh builds ft-3.14t where the mirror serves python3.14's
// source, else ft-3.13t).
var ExpectedFreeThreaded = []string{"ft-3.14t", "ft-3.13t"}

// ManifestPath is where scripts/pythons.sh wrote the manifest.
func ManifestPath() string {
	if p := os.Getenv("PYOBS_INTERPRETERS"); p != "" {
		return p
	}
	c := os.Getenv("PYOBS_PYTHONS_CACHE")
	if c == "" {
		c = "/var/cache/pyobs-pythons"
	}
	return filepath.Join(c, "interpreters.tsv")
}

// Interpreters lists the manifest's GIL builds; a missing interpreter skips
// (fails in CI). The free-threaded ones are left out, by name in the test
// log: the tests that iterate this list check what GIL builds have (a GIL
// holder, the in-kernel walker's layouts); FreeThreadedInterpreters lists
// them for the tests that cover them.
func Interpreters(t testing.TB) []Interp {
	t.Helper()
	var out, ft []Interp
	for _, i := range allInterpreters(t) {
		if i.FreeThreaded() {
			ft = append(ft, i)
			continue
		}
		out = append(out, i)
	}
	for _, i := range ft {
		t.Logf("%s left out: a free-threaded build is covered by the free-threaded tests (pyframes TestFreeThreaded*, cmd/pyobs TestFreeThreaded*)", i.Label)
	}
	if len(out) == 0 {
		Skip(t, "the interpreter manifest lists no GIL-build interpreter")
	}
	return out
}

// FreeThreadedInterpreters lists the manifest's free-threaded builds; none
// skips (fails in CI, where scripts/pythons.sh --require-all builds ft-3.14t).
func FreeThreadedInterpreters(t testing.TB) []Interp {
	t.Helper()
	var out []Interp
	for _, i := range allInterpreters(t) {
		if i.FreeThreaded() {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		Skip(t, "no free-threaded interpreter (ft-3.14t) in the manifest: run scripts/pythons.sh")
	}
	return out
}

func allInterpreters(t testing.TB) []Interp {
	t.Helper()
	b, err := os.ReadFile(ManifestPath())
	if err != nil {
		Skip(t, fmt.Sprintf("no interpreter manifest (%v): run scripts/pythons.sh", err))
	}
	var out []Interp
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			continue
		}
		out = append(out, Interp{Label: f[0], Version: f[1], Argv: strings.Fields(f[2])})
		have[f[0]] = true
	}
	var missing []string
	for _, e := range Expected {
		if !have[e] {
			missing = append(missing, e)
		}
	}
	ft := false
	for _, e := range ExpectedFreeThreaded {
		ft = ft || have[e]
	}
	if !ft {
		missing = append(missing, strings.Join(ExpectedFreeThreaded, "|"))
	}
	if len(missing) > 0 && InCI() {
		t.Fatalf("CI=true and interpreters are missing from %s: %v", ManifestPath(), missing)
	}
	if len(out) == 0 {
		Skip(t, "the interpreter manifest lists no interpreter")
	}
	return out
}

// Find returns the interpreter with this label, skipping when absent.
func Find(t testing.TB, label string) Interp {
	t.Helper()
	for _, i := range allInterpreters(t) {
		if i.Label == label {
			return i
		}
	}
	Skip(t, "interpreter "+label+" is not installed: run scripts/pythons.sh")
	return Interp{}
}

// Repo returns the repository root (where go.mod is).
func Repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Target is a spawned test process.
type Target struct {
	Cmd   *exec.Cmd
	Pid   int
	Lines chan string // stdout lines after READY
}

// Start runs argv with the script and args, and waits for a line starting
// with "READY" on stdout. The process is killed at the end of the test.
func Start(t testing.TB, interp Interp, script string, args ...string) *Target {
	t.Helper()
	argv := append(append(append([]string{}, interp.Argv...), filepath.Join(Repo(), "testdata", "targets", script)), args...)
	return StartArgv(t, argv, 30*time.Second)
}

// StartArgv runs argv and waits for READY.
func StartArgv(t testing.TB, argv []string, timeout time.Duration) *Target {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("can't start %v: %v", argv, err)
	}
	tg := &Target{Cmd: cmd, Pid: cmd.Process.Pid, Lines: make(chan string, 1024)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			if !seen && strings.HasPrefix(sc.Text(), "READY") {
				seen = true
				close(ready)
				continue
			}
			if seen {
				select {
				case tg.Lines <- sc.Text():
				default:
				}
			}
		}
		if !seen {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(timeout):
		t.Fatalf("target %v did not print READY within %v", argv, timeout)
	}
	return tg
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds bin/pyobs once per test process into a world-readable
// temporary folder (so tests can run it as another user) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pyobs-bin-")
		if err != nil {
			buildErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		binPath = filepath.Join(dir, "pyobs")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, "./cmd/pyobs")
		cmd.Dir = Repo()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Result of running pyobs.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs the pyobs binary with args and a timeout.
func Run(t testing.TB, timeout time.Duration, args ...string) Result {
	t.Helper()
	return RunCmd(t, timeout, exec.Command(Binary(t), args...))
}

// RunCmd runs a prepared command (e.g. with credentials set).
func RunCmd(t testing.TB, timeout time.Duration, cmd *exec.Cmd) Result {
	t.Helper()
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatalf("can't run %v: %v", cmd.Args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not finish within %v\nstderr: %s", cmd.Args, timeout, se.String())
	}
	return Result{Stdout: so.String(), Stderr: se.String(), Code: cmd.ProcessState.ExitCode()}
}

// ProcStatus returns fields of /proc/PID/status (State, TracerPid, …).
func ProcStatus(pid int) map[string]string {
	st, err := procfs.Default().Status(pid)
	if err != nil {
		return nil
	}
	return st.Fields
}

// CPUHog keeps n CPUs busy until the test ends (busy-looping shells): the
// competing load a timing-sensitive test must hold under.
func CPUHog(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("can't start a CPU hog: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		})
	}
}

// WaitBPFLink waits until process pid holds an attached BPF link (an fd
// whose fdinfo names a link_type): an eBPF engine's programs are in place.
func WaitBPFLink(t testing.TB, pid int, timeout time.Duration) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && strings.Contains(string(b), "link_type:") {
				return
			}
		}
	}
	t.Fatalf("pid %d attached no BPF link within %v", pid, timeout)
}

// ChromiumResult opens the page at path in headless Chromium (bin) and
// returns the URL-unescaped text of the element with id elementID, which
// the page's own script fills (--dump-dom prints the DOM once it ran).
func ChromiumResult(t testing.TB, bin, path, elementID string) string {
	t.Helper()
	// Chromium may still be writing its profile as it exits: not TempDir.
	profileDir, err := os.MkdirTemp("", "pyobs-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profileDir)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profileDir, "--run-all-compositor-stages-before-draw", "--dump-dom",
		(&url.URL{Scheme: "file", Path: path}).String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", bin, err, stderr.String())
	}
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(elementID) + `"[^>]*>([^<]*)<`).FindSubmatch(stdout.Bytes())
	if m == nil {
		t.Fatalf("no %s in the DOM (did the page load?)\nDOM (head):\n%.3000s\nstderr:\n%s", elementID, stdout.String(), stderr.String())
	}
	s, err := url.QueryUnescape(string(m[1]))
	if err != nil {
		t.Fatalf("%s: %v", elementID, err)
	}
	return s
}
