package bpfload

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// bpfPackages are the packages whose eBPF objects bpf2go generates (the
// Makefile's BPF_PKGS).
var bpfPackages = []string{"../offcpu/schedbpf", "../trace/tracepoint", "../red", "../red/sampler", "../kwalk", "../mem/probebpf", "../procset/countbpf"}

// TestObjectsUpToDate: the committed objects and Go bindings are the ones
// the C sources (and pyobs.h) build to. Each package's own go:generate line
// is run again, into a temporary directory, and every file it writes must
// equal the committed one byte for byte. Needs clang and llvm-strip (.ci/run
// installs them); skipped without them, except in CI.
func TestObjectsUpToDate(t *testing.T) {
	for _, tool := range []string{"clang", "llvm-strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" not installed: can't rebuild the eBPF objects to compare")
		}
	}
	// Built once (the version go.mod pins), run once per object.
	bpf2go := filepath.Join(t.TempDir(), "bpf2go")
	if b, err := exec.Command("go", "build", "-o", bpf2go, "github.com/cilium/ebpf/cmd/bpf2go").CombinedOutput(); err != nil {
		t.Fatalf("build bpf2go: %v\n%s", err, b)
	}
	for _, dir := range bpfPackages {
		pkg, lines := generateLines(t, dir)
		for _, args := range lines {
			bpf2goRun(t, bpf2go, dir, pkg, args)
		}
	}
}

// bpf2goRun builds one go:generate line's object into a temporary folder
// and compares what it writes with the committed files.
func bpf2goRun(t *testing.T, bpf2go, dir, pkg string, args []string) {
	t.Helper()
	name := filepath.Base(dir)
	for i, a := range args {
		if strings.HasSuffix(a, ".c") && i > 0 {
			name += "/" + args[i-1] // the object's identifier (syscalls, syscallslate, …)
		}
	}
	t.Run(name, func(t *testing.T) {
		out := t.TempDir()
		cmd := exec.Command(bpf2go, append([]string{"-output-dir", out}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPACKAGE="+pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("bpf2go in %s: %v\n%s", dir, err, b)
		}
		files, err := os.ReadDir(out)
		if err != nil || len(files) == 0 {
			t.Fatalf("bpf2go wrote nothing in %s (%v)", out, err)
		}
		for _, f := range files {
			built, err := os.ReadFile(filepath.Join(out, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			committed, err := os.ReadFile(filepath.Join(dir, f.Name()))
			if err != nil {
				t.Errorf("%s/%s is not committed: run make generate (%v)", dir, f.Name(), err)
				continue
			}
			if !bytes.Equal(built, committed) {
				t.Errorf("%s/%s is stale: run make generate and commit it", dir, f.Name())
			}
		}
	})
}

// generateLines finds the package's bpf2go go:generate lines (one per
// object: a program and its variants): its package name and each line's
// bpf2go arguments.
func generateLines(t *testing.T, dir string) (pkg string, lines [][]string) {
	t.Helper()
	const run = "//go:generate go run github.com/cilium/ebpf/cmd/bpf2go "
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		var p string
		var a [][]string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := sc.Text()
			if rest, ok := strings.CutPrefix(l, "package "); ok && p == "" {
				p = strings.TrimSpace(rest)
			}
			if rest, ok := strings.CutPrefix(l, run); ok {
				a = append(a, strings.Fields(rest))
			}
		}
		f.Close()
		if a != nil {
			return p, a
		}
	}
	t.Fatalf("no bpf2go go:generate line in %s", dir)
	return "", nil
}
