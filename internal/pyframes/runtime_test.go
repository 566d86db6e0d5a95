package pyframes

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
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
