package pyframes

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoaderProgram(t *testing.T) {
	for _, c := range []struct {
		args    []string
		prog    string
		libPath []string
		ok      bool
	}{
		{[]string{"--library-path", "/a:/b", "/usr/bin/python3", "x.py"}, "/usr/bin/python3", []string{"/a", "/b"}, true},
		{[]string{"--inhibit-cache", "--argv0", "py", "./python", "-c", "1"}, "./python", nil, true},
		{[]string{"--preload", "libx.so", "--", "--odd-name"}, "--odd-name", nil, true},
		{[]string{"--verify"}, "", nil, false},
		{[]string{"--library-path"}, "", nil, false},
		{nil, "", nil, false},
	} {
		prog, lp, ok := loaderProgram(c.args)
		if prog != c.prog || ok != c.ok || !reflect.DeepEqual(lp, c.libPath) {
			t.Errorf("loaderProgram(%q) = %q, %q, %v; want %q, %q, %v", c.args, prog, lp, ok, c.prog, c.libPath, c.ok)
		}
	}
}

func TestScriptInterpreter(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "python3.12")
	if err := os.WriteFile(py, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent:" + dir}
	for _, c := range []struct{ line, want string }{
		{"#!/usr/bin/python3 -u\nrest", "/usr/bin/python3"},
		{"#! /opt/py/bin/python\n", "/opt/py/bin/python"},
		{"#!/usr/bin/env python3.12\n", py},
		{"#!/usr/bin/env -S A=1 python3.12 -u -X dev\n", py},
	} {
		got, err := scriptInterpreter("s", []byte(c.line), env)
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.line, got, err, c.want)
		}
	}
	for _, bad := range []string{"#!\n", "#!   \n", "#!/usr/bin/env -S\n", "#!/usr/bin/env nosuch\n"} {
		if got, err := scriptInterpreter("s", []byte(bad), env); err == nil {
			t.Errorf("%q: %q, no error", bad, got)
		}
	}
}

func TestEnvProgram(t *testing.T) {
	base := []string{"PATH=/usr/bin", "HOME=/root", "LD_LIBRARY_PATH=/old"}
	for _, c := range []struct {
		args      []string
		rest      []string
		env       []string
		dir       string
		wantError bool
	}{
		{[]string{"HOT=alpha", "python3", "x.py"}, []string{"python3", "x.py"}, append(append([]string{}, base...), "HOT=alpha"), "", false},
		{[]string{"-i", "PATH=/opt/bin", "python3"}, []string{"python3"}, []string{"PATH=/opt/bin"}, "", false},
		{[]string{"-u", "LD_LIBRARY_PATH", "--unset=HOME", "python3"}, []string{"python3"}, []string{"PATH=/usr/bin"}, "", false},
		{[]string{"LD_LIBRARY_PATH=/new", "python3"}, []string{"python3"}, []string{"PATH=/usr/bin", "HOME=/root", "LD_LIBRARY_PATH=/new"}, "", false},
		{[]string{"-C", "/srv", "--", "./py", "-c", "1"}, []string{"./py", "-c", "1"}, base, "/srv", false},
		{[]string{"-S", "A=1 python3 -u", "x.py"}, []string{"python3", "-u", "x.py"}, append(append([]string{}, base...), "A=1"), "", false},
		{[]string{"-", "--", "A=1", "python3"}, []string{"python3"}, []string{"A=1"}, "", false},
		{[]string{"-S", "python3 'a b'"}, nil, nil, "", true},
		{[]string{"-i", "A=1"}, nil, nil, "", true},
		{[]string{"--frobnicate", "python3"}, nil, nil, "", true},
		{[]string{"-u"}, nil, nil, "", true},
	} {
		rest, env, dir, err := envProgram(c.args, base)
		if (err != nil) != c.wantError || !reflect.DeepEqual(rest, c.rest) || !reflect.DeepEqual(env, c.env) || dir != c.dir {
			t.Errorf("envProgram(%q) = %q, %q, %q, %v; want %q, %q, %q, error %v", c.args, rest, env, dir, err, c.rest, c.env, c.dir, c.wantError)
		}
	}
}

func FuzzEnvProgram(f *testing.F) {
	f.Add("-i\x00A=1\x00python3\x00x.py")
	f.Add("-S\x00A=1 python3 -u\x00--\x00-C")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		rest, env, _, err := envProgram(args, []string{"PATH=/usr/bin"})
		if err != nil {
			return
		}
		if len(rest) == 0 {
			t.Fatalf("%q: no command", args)
		}
		for _, kv := range env {
			if !strings.Contains(kv, "=") {
				t.Fatalf("%q: environment entry %q", args, kv)
			}
		}
	})
}

func TestLdSoConfDirs(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ld.so.conf", "# top\n/usr/local/lib\ninclude conf.d/*.conf\nrelative/ignored\n")
	write("conf.d/a.conf", "/opt/a/lib # trailing\n\ninclude "+filepath.Join(dir, "ld.so.conf")+"\n")
	write("conf.d/b.conf", "/opt/b/lib\n")
	got := ldSoConfDirs(filepath.Join(dir, "ld.so.conf"), 0)
	// The include loop stops at its depth bound; every directory is there.
	for _, want := range []string{"/usr/local/lib", "/opt/a/lib", "/opt/b/lib"} {
		found := false
		for _, d := range got {
			found = found || d == want
		}
		if !found {
			t.Errorf("%s missing from %q", want, got)
		}
	}
	for _, d := range got {
		if !filepath.IsAbs(d) {
			t.Errorf("relative directory %q kept", d)
		}
	}
}

func FuzzLoaderProgram(f *testing.F) {
	f.Add("--library-path\x00/a:/b\x00/usr/bin/python3\x00x.py")
	f.Add("--\x00--x")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		prog, _, ok := loaderProgram(args)
		if ok {
			found := false
			for _, a := range args {
				found = found || a == prog
			}
			if !found {
				t.Fatalf("%q: program %q is none of the arguments", args, prog)
			}
		}
	})
}

func FuzzScriptInterpreter(f *testing.F) {
	f.Add([]byte("#!/usr/bin/env -S python3 -u\n"))
	f.Add([]byte("#!/bin/sh\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		b[0], b[1] = '#', '!'
		got, err := scriptInterpreter("s", b, []string{"PATH=/nonexistent"})
		if err == nil && (got == "" || strings.ContainsAny(got, " \t\n")) {
			t.Fatalf("%q: interpreter %q", b, got)
		}
	})
}
