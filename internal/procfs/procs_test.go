package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"python3\x00app.py\x00-v\x00", []string{"python3", "app.py", "-v"}},
		{"python3\x00\x00x\x00", []string{"python3", "", "x"}}, // an empty argument stays
		{"rewritten title", []string{"rewritten title"}},       // setproctitle: one string
		{"", nil},
		{"\x00\x00", nil},
	} {
		if got := ParseCmdline([]byte(c.in)); !slices.Equal(got, c.want) {
			t.Errorf("ParseCmdline(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzParseCmdline: any bytes parse without a panic; arguments without
// NULs, written the way the kernel writes them, come back as they were.
func FuzzParseCmdline(f *testing.F) {
	f.Add([]byte("python3\x00app.py\x00"))
	f.Add([]byte("a"))
	f.Add([]byte{0, 0, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		args := ParseCmdline(b)
		for _, a := range args {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("argument %q holds a NUL", a)
			}
		}
		if len(args) > 0 && args[len(args)-1] != "" {
			again := ParseCmdline([]byte(strings.Join(args, "\x00") + "\x00"))
			if !slices.Equal(again, args) {
				t.Fatalf("round trip %q -> %q", args, again)
			}
		}
	})
}

func TestCgroupProcs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("42\n7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := CgroupProcs(dir); err != nil || !slices.Equal(got, []int{7, 42}) {
		t.Fatalf("CgroupProcs = %v, %v; want [7 42]", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CgroupProcs(dir); err == nil || !strings.Contains(err.Error(), `"x" is not a pid`) {
		t.Fatalf("a bad line: %v", err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "missing")} {
		if _, err := CgroupID(p); !errors.Is(err, ErrNotCgroup) || !strings.Contains(err.Error(), p) {
			t.Errorf("CgroupID(%s) = %v: want ErrNotCgroup, naming it", p, err)
		}
	}
}

func TestDescendants(t *testing.T) {
	fs := Default()
	kids, err := fs.Descendants(1)
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	if !slices.Contains(kids, self) {
		t.Fatalf("pid %d is not among pid 1's descendants (%d of them)", self, len(kids))
	}
}
