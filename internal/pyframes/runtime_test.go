package pyframes

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// FuzzRuntimeFromELF: the detector over arbitrary ELF bytes never panics
// and returns a runtime address only with a symbol or section behind it.
// Seeds: the start of real interpreter binaries when present.
func FuzzRuntimeFromELF(f *testing.F) {
	for _, glob := range []string{"/usr/bin/python3.11", os.Getenv("HOME") + "/.pyenv/versions/3.12.*/lib/libpython3.12.so.1.0"} {
		matches, _ := filepath.Glob(glob)
		for _, m := range matches {
			if b, err := os.ReadFile(m); err == nil && len(b) > 0 {
				f.Add(b[:min(len(b), 64<<10)])
			}
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		maps := []Mapping{{Start: 0x400000, End: 0x500000, Offset: 0, Path: "/x"}}
		info, err := runtimeFromELF(ef, "/x", maps)
		if err == nil && (info == nil || info.Runtime == 0) {
			t.Fatalf("no error but no runtime: %+v", info)
		}
	})
}

func TestVersionFromName(t *testing.T) {
	cases := map[string]string{"/usr/lib/libpython3.10.so.1.0": "3.10", "/x/python3.12": "3.12", "/x/python3.9d": "3.9"}
	for in, want := range cases {
		v, ok := versionFromName(in)
		if !ok || v.String() != want {
			t.Errorf("versionFromName(%q) = %v %v, want %s", in, v, ok, want)
		}
	}
	if _, ok := versionFromName("/usr/bin/perl"); ok {
		t.Error("perl has a Python version")
	}
}

// TestDynSymsMatchesDecoder: the in-place dynamic symbol lookup finds the
// same addresses as debug/elf's decoded table, in the interpreters of
// this machine (shared libpython, Debian's static python3.11).
func TestDynSymsMatchesDecoder(t *testing.T) {
	home := os.Getenv("HOME")
	var files []string
	for _, glob := range []string{"/usr/bin/python3.11", home + "/.pyenv/versions/3.1*/lib/libpython3.1*.so.1.0",
		"/var/cache/pyobs-pythons/sid-3.1*/root/usr/bin/python3.1?"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	if len(files) == 0 {
		testutil.Skip(t, "no CPython binary on this machine (scripts/pythons.sh provides them)")
	}
	want := map[string]bool{}
	for _, s := range wantSyms {
		want[s] = true
	}
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		if !dynSyms(f, want, got) {
			t.Fatalf("%s: no dynamic symbol table read", path)
		}
		ds, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		ref := map[string]uint64{}
		for _, s := range ds {
			if want[s.Name] && s.Value != 0 && s.Section != elf.SHN_UNDEF {
				if _, ok := ref[s.Name]; !ok {
					ref[s.Name] = s.Value
				}
			}
		}
		f.Close()
		if len(ref) == 0 || fmt.Sprint(got) != fmt.Sprint(ref) {
			t.Errorf("%s: in place %v, decoded %v", path, got, ref)
		}
		t.Logf("%s: %d of %d symbols", path, len(got), len(wantSyms))
	}
}

// TestVersionMatchesTarget: the version read from each interpreter is the
// one it reports itself (sys.version_info), micro included. 3.10 has no
// Py_Version: its micro comes from Py_GetVersion's PY_VERSION literal (it
// was printed as "3.10").
func TestVersionMatchesTarget(t *testing.T) {
	testutil.RequireRoot(t)
	interps := append(testutil.Interpreters(t), testutil.FreeThreadedInterpreters(t)...)
	for _, in := range interps {
		t.Run(in.Label, func(t *testing.T) {
			argv := append(append([]string{}, in.Argv...), "-c",
				"import sys, time\nprint('READY', flush=True)\nprint('%d.%d.%d' % sys.version_info[:3], flush=True)\ntime.sleep(60)")
			tg := testutil.StartArgv(t, argv, 30*time.Second)
			var want string
			select {
			case want = <-tg.Lines:
			case <-time.After(30 * time.Second):
				t.Fatal("the target did not print its sys.version_info")
			}
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Version().String(); got != strings.TrimSpace(want) {
				t.Errorf("version %s, the target says %s (%s)", got, want, p.Info.Binary)
			}
		})
	}
}
