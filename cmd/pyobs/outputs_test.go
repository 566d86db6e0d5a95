package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestOutputReplacedWhole (issue 8, point 5): an existing -o FILE is only
// ever replaced by a complete new one. pyobs is stopped at every step of a
// recording's life: while recording (SIGKILL, SIGINT, SIGTERM), the moment
// its temporary appears (SIGINT, SIGTERM), at its write and at its rename
// (SIGKILL injected by strace at that system call: the one 100 kB write
// of an SVG is too quick to hit by timing), and when the write fails
// half-way (RLIMIT_FSIZE: EFBIG, like a full disk). The old file must be
// intact or the new one complete. A temporary may survive SIGKILL (nothing
// can clean up after it), but only as a hidden file named after the output
// (.FILE.tmpNNN); in every other case none may remain.
func TestOutputReplacedWhole(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "memhog_stacks.py") // thousands of stacks: a sizeable SVG
	bin := testutil.Binary(t)
	old := []byte("<svg>the previous, complete profile</svg>\n")
	strace, _ := exec.LookPath("strace")

	for _, c := range []struct {
		name     string
		sig      syscall.Signal
		when     string // "recording", "create", "write", "rename", "efbig"
		wantOld  bool   // the old file must be intact (else: replaced by a complete new one)
		leftover bool   // a hidden temporary may remain
	}{
		{"SIGKILL/while-recording", syscall.SIGKILL, "recording", true, false},
		{"SIGINT/while-recording", syscall.SIGINT, "recording", false, false},
		{"SIGTERM/while-recording", syscall.SIGTERM, "recording", false, false},
		{"SIGINT/at-create", syscall.SIGINT, "create", false, false},
		{"SIGTERM/at-create", syscall.SIGTERM, "create", false, false},
		{"SIGKILL/at-write", syscall.SIGKILL, "write", true, true},
		{"SIGKILL/at-rename", syscall.SIGKILL, "rename", true, true},
		{"EFBIG/half-written", 0, "efbig", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "existing.svg")
			if err := os.WriteFile(out, old, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"record", "-p", strconv.Itoa(tg.Pid), "-F", "997", "-d", "1500ms", "-o", out}
			var cmd *exec.Cmd
			switch c.when {
			case "write", "rename":
				if strace == "" {
					testutil.Skip(t, "no strace(1) to inject SIGKILL at a system call")
				}
				sc := "renameat,renameat2,rename"
				if c.when == "write" {
					sc = "write" // pyobs's first write(2) is the output's
				}
				cmd = exec.Command(strace, append([]string{"-f", "-qq", "-o", "/dev/null", "-e", "trace=" + sc, "-e", "inject=" + sc + ":signal=KILL:when=1", bin}, args...)...)
			default:
				cmd = exec.Command(bin, args...)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			switch c.when {
			case "recording":
				time.Sleep(500 * time.Millisecond)
				_ = cmd.Process.Signal(c.sig)
			case "create":
				if !signalOnCreate(t, dir, ".existing.svg.tmp", cmd.Process, c.sig, done) {
					t.Errorf("no temporary was created")
				}
			case "efbig":
				lim := unix.Rlimit{Cur: 32 << 10, Max: 32 << 10}
				if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_FSIZE, &lim, nil); err != nil {
					t.Fatalf("prlimit: %v", err)
				}
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("pyobs did not end")
			}
			b, err := os.ReadFile(out)
			switch {
			case err != nil:
				t.Errorf("the output file is gone: %v", err)
			case bytes.Equal(b, old):
				if !c.wantOld {
					t.Errorf("the old file was not replaced (pyobs %v: %s)", cmd.ProcessState, stderr.String())
				}
			case c.wantOld:
				t.Errorf("the old file was replaced (%d bytes)", len(b))
			case !bytes.HasSuffix(bytes.TrimSpace(b), []byte("</svg>")):
				t.Errorf("the new output is incomplete (%d bytes, ends %q)", len(b), tail(string(b), 40))
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				switch n := e.Name(); {
				case n == "existing.svg":
				case strings.HasPrefix(n, ".existing.svg.tmp") && c.leftover:
					fi, _ := e.Info()
					t.Logf("after %s: temporary %s (%d bytes, mode %v) left behind, hidden and named after the output", c.name, n, fi.Size(), fi.Mode())
				default:
					t.Errorf("file %s left next to the output", n)
				}
			}
			switch c.when {
			case "efbig":
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				if cmd.ProcessState.ExitCode() != exitError || len(lines) != 1 || !strings.Contains(lines[0], out) || strings.Contains(lines[0], "panic") {
					t.Errorf("a failed write: exit %d, stderr %q; want exit %d and one line naming %s", cmd.ProcessState.ExitCode(), stderr.String(), exitError, out)
				}
			case "recording", "create":
				if c.sig != syscall.SIGKILL && cmd.ProcessState.ExitCode() != 0 {
					t.Errorf("%v: %v, want exit 0 (the recording ends early and is written): %s", c.sig, cmd.ProcessState, stderr.String())
				}
			}
		})
	}
}

// signalOnCreate sends sig to p as soon as a file whose name starts with
// prefix is created in dir (inotify), and reports whether it did before
// done closed.
func signalOnCreate(t *testing.T, dir, prefix string, p *os.Process, sig syscall.Signal, done <-chan struct{}) bool {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	buf := make([]byte, 4096)
	for {
		select {
		case <-done:
			return false
		default:
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 10); n <= 0 {
			continue
		}
		n, err := unix.Read(fd, buf)
		if err != nil {
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			if strings.HasPrefix(name, prefix) {
				_ = p.Signal(sig)
				return true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestStatLiveOutputExisting: stat -i (live) -o FILE over an existing
// file, killed with SIGKILL mid-stream: the promise is the old file intact
// (killed before the first interval was complete) or a new one of complete
// intervals (each line a whole JSON report), never a partial one.
func TestStatLiveOutputExisting(t *testing.T) {
	testutil.RequireRoot(t)
	tg := sleeperPy(t)
	old := []byte("{\"previous\": \"complete\"}\n")
	for _, after := range []time.Duration{20 * time.Millisecond, 90 * time.Millisecond, 350 * time.Millisecond, 1100 * time.Millisecond} {
		dir := t.TempDir()
		out := filepath.Join(dir, "stat.jsonl")
		if err := os.WriteFile(out, old, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(testutil.Binary(t), "stat", "-i", "100ms", "--format", "json", "-p", strconv.Itoa(tg.Pid), "-o", out)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b, _ := os.ReadFile(out)
		if bytes.Equal(b, old) {
			t.Logf("killed after %v: the old file intact", after)
			continue
		}
		lines := strings.SplitAfter(string(b), "\n")
		if len(b) == 0 || lines[len(lines)-1] != "" {
			t.Errorf("killed after %v: %s ends in a partial line (%d bytes)", after, out, len(b))
			continue
		}
		for i, l := range lines[:len(lines)-1] {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil || v["pid"] == nil {
				t.Errorf("killed after %v: line %d of %s is not a whole report: %v: %.80q", after, i+1, out, err, l)
			}
		}
		t.Logf("killed after %v: a new file of %d whole intervals", after, len(lines)-1)
	}
}

// TestOutputDirCheckedFirst: an -o in a missing directory, or under a file,
// is refused before anything is observed: at once (not after the window),
// exit 2, one line naming the output and the reason (not pyobs's temporary),
// and a -- CMD is not spawned.
func TestOutputDirCheckedFirst(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Binary(t) // built before the clock starts
	tg := startInline(t, testutil.Find(t, "pyenv-3.12"), "import time\nprint('READY', flush=True)\ntime.sleep(600)\n", nil)
	pid := strconv.Itoa(tg.Pid)
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(args []string, out, reason string) {
		t.Helper()
		t0 := time.Now()
		r := testutil.Run(t, 60*time.Second, args...)
		took := time.Since(t0)
		want := "pyobs: can't write " + out + ": " + reason + "\n"
		if r.Code != 2 || r.Stderr != want || took > 1500*time.Millisecond {
			t.Errorf("%v: exit %d after %v, stderr %q; want exit 2 at once, %q", args, r.Code, took.Round(time.Millisecond), r.Stderr, want)
		}
	}
	for _, c := range [][]string{
		{"trace"}, {"stat"}, {"red"}, {"mem"}, {"record"}, {"offcpu"},
	} {
		out := filepath.Join(missing, "out.json")
		check(append(c, "-p", pid, "-d", "3s", "-o", out), out, "directory "+missing+" does not exist")
	}
	out := filepath.Join(file, "out.json")
	check([]string{"stat", "-p", pid, "-d", "3s", "-o", out}, out, file+" is not a directory")
	out = filepath.Join(missing, "dump.txt")
	check([]string{"dump", "-p", pid, "-o", out}, out, "directory "+missing+" does not exist")

	// -- CMD: refused before the command is spawned.
	marker := filepath.Join(t.TempDir(), "spawned")
	out = filepath.Join(missing, "stat.json")
	check([]string{"stat", "-o", out, "--", "sh", "-c", "touch " + marker + "; sleep 3"}, out, "directory "+missing+" does not exist")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("stat -- CMD with an unwritable -o spawned the command")
	}
}

// TestJSONByExtension: a report command given -o FILE.json without
// --format writes JSON, as record's -o picks its format by extension.
func TestJSONByExtension(t *testing.T) {
	testutil.RequireRoot(t)
	tg := sleeperPy(t)
	for _, c := range [][]string{{"dump"}, {"stat", "-d", "300ms"}, {"trace", "-d", "300ms"}} {
		out := filepath.Join(t.TempDir(), "r.JSON")
		r := testutil.Run(t, time.Minute, append(c, "-p", strconv.Itoa(tg.Pid), "-o", out)...)
		b, _ := os.ReadFile(out)
		var v map[string]any
		if r.Code != 0 || json.Unmarshal(b, &v) != nil {
			t.Errorf("%v -o %s: exit %d, not JSON: %.200s", c, out, r.Code, b)
		}
	}
}
