package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestRecordOutputs: each format is written whole, pprof loads in
// `go tool pprof`, folded reads back, and the footer reports the rates.
func TestRecordOutputs(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "busy.py")
	dir := t.TempDir()
	for _, c := range []struct{ format, file string }{
		{"folded", "p.folded"}, {"pprof", "p.pb.gz"}, {"svg", "p.svg"}, {"speedscope", "p.speedscope.json"}, {"gecko", "p.gecko.json"}, {"json", "p.json"},
	} {
		out := filepath.Join(dir, c.file)
		r := testutil.Run(t, 60*time.Second, "record", "-p", fmt.Sprint(tg.Pid), "-d", "1s", "-F", "199", "--format", c.format, "-o", out)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d: %s", c.format, r.Code, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "samples") || !strings.Contains(r.Stderr, "achieved") || !strings.Contains(r.Stderr, "observer CPU") {
			t.Errorf("%s: footer lacks the recording's account: %q", c.format, r.Stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: no output: %v", c.format, err)
		}
		switch c.format {
		case "folded":
			p, err := flame.ReadFolded(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("folded output does not read back: %v", err)
			}
			if !strings.Contains(string(b), "recurse (") || p.Total() == 0 {
				t.Errorf("folded output lacks the busy thread's frames:\n%.500s", b)
			}
		case "pprof":
			gobin, err := exec.LookPath("go")
			if err != nil {
				testutil.Skip(t, "no go toolchain on PATH to run go tool pprof")
			}
			top, err := exec.Command(gobin, "tool", "pprof", "-top", out).CombinedOutput()
			if err != nil || !strings.Contains(string(top), "recurse") {
				t.Errorf("go tool pprof -top: %v\n%s", err, top)
			}
		case "svg":
			if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("<?xml")) && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("<svg")) {
				t.Errorf("svg output starts with %.40q", b)
			}
		}
	}
}

// TestRecordInterrupt: SIGINT mid-recording still writes a complete output,
// exits 0, and leaves the target running and untraced.
func TestRecordInterrupt(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.Start(t, in, "busy.py")
	out := filepath.Join(t.TempDir(), "p.folded")
	cmd := exec.Command(testutil.Binary(t), "record", "-p", fmt.Sprint(tg.Pid), "-F", "499", "-o", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGINT: %v (stderr %q)", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("pyobs did not stop after SIGINT")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := flame.ReadFolded(bytes.NewReader(b))
	if err != nil || p.Total() < 100 {
		t.Fatalf("output after SIGINT: err %v, %d samples", err, p.Total())
	}
	st := testutil.ProcStatus(tg.Pid)
	if st["TracerPid"] != "0" || !strings.HasPrefix(st["State"], "R") && !strings.HasPrefix(st["State"], "S") {
		t.Errorf("target after recording: TracerPid %s, State %s", st["TracerPid"], st["State"])
	}
}

// TestRecordSpawn: -- CMD records the program until it exits and passes on its status.
func TestRecordSpawn(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "sid-3.14")
	out := filepath.Join(t.TempDir(), "p.folded")
	args := append([]string{"record", "-F", "499", "-o", out, "--"}, in.Argv...)
	args = append(args, "-c", "import sys,time\ndef spin():\n    t=time.monotonic()+1\n    while time.monotonic()<t: pass\nspin()\nsys.exit(3)")
	r := testutil.Run(t, 60*time.Second, args...)
	if r.Code != 3 {
		t.Fatalf("exit %d, want the program's 3: %s", r.Code, r.Stderr)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "spin (<string>:4)") {
		t.Errorf("recording of the spawned program lacks spin():\n%.400s", b)
	}
}
