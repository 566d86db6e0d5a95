package pyframes_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// noAddrs is k without what the process decides as it runs (ASLR, its
// interpreter state, so whether its code-object counter was found; its
// TLS layout): what a command's files can tell.
func noAddrs(k pyframes.KernelLayout) pyframes.KernelLayout {
	k.CodeType, k.FrameType, k.Interp, k.CodeGenerationAddr, k.CodeGenerationWhy = 0, 0, 0, 0, ""
	k.AttachedTLS, k.HasAttachedTLS = 0, false
	return k
}

// The layout read from a command's files before it runs is the one the
// running interpreter has, on every interpreter of the machine (GIL and
// free-threaded builds, shared libpython, static, run through sid's
// loader), and its PyCode_Type is the running one less the load bias.
func TestCommandLayoutMatchesLive(t *testing.T) {
	testutil.RequireRoot(t)
	interps := append(testutil.Interpreters(t), testutil.FreeThreadedInterpreters(t)...)
	for _, in := range interps {
		t.Run(in.Label, func(t *testing.T) {
			argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "kwalk_deep.py"))
			pred, path, err := pyframes.CommandLayout(argv, os.Environ())
			if err != nil {
				t.Fatalf("CommandLayout(%q): %v", argv, err)
			}
			tg := testutil.StartArgv(t, argv, 30*time.Second)
			p, err := pyframes.Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			live, err := p.KernelLayout()
			if err != nil {
				t.Fatal(err)
			}
			if a, b := noAddrs(*pred), noAddrs(*live); a != b {
				t.Errorf("from %s:\n%+v\nrunning:\n%+v", path, a, b)
			}
			if p.Info.Binary != path {
				t.Errorf("read %s, the process maps its interpreter from %s", path, p.Info.Binary)
			}
			if pred.CodeType+p.Info.Bias != live.CodeType {
				t.Errorf("PyCode_Type 0x%x in the file + bias 0x%x != 0x%x running", pred.CodeType, p.Info.Bias, live.CodeType)
			}
		})
	}
}

// A #! script, directly and through env with the command's PATH.
func TestCommandLayoutScripts(t *testing.T) {
	in := testutil.Interpreters(t)[0]
	if len(in.Argv) != 1 {
		t.Skipf("%s runs through a loader; the scripts need a plain interpreter path", in.Label)
	}
	want, _, err := pyframes.CommandLayout(in.Argv, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	direct := write("direct", "#!"+in.Argv[0]+" -u\nprint(1)\n")
	viaEnv := write("via-env", "#!/usr/bin/env -S PYTHONUNBUFFERED=1 "+filepath.Base(in.Argv[0])+" -u\nprint(1)\n")
	env := append(os.Environ(), "PATH="+filepath.Dir(in.Argv[0])+":/usr/bin:/bin")
	base, bin := filepath.Base(in.Argv[0]), filepath.Dir(in.Argv[0])
	for _, argv := range [][]string{{direct}, {viaEnv, "x"}, {"env", "HOT=1", base, "-c", "1"},
		{"/usr/bin/env", "-i", "PATH=" + bin, base}, {"env", "-C", bin, "./" + base}} {
		got, path, err := pyframes.CommandLayout(argv, env)
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		if *got != *want {
			t.Errorf("%v (read %s): %+v, want %+v", argv, path, *got, *want)
		}
	}
	// Not Python: said so.
	sh := write("sh", "#!/bin/sh\necho\n")
	for _, argv := range [][]string{{"/bin/sh", "-c", "true"}, {sh}} {
		if _, _, err := pyframes.CommandLayout(argv, os.Environ()); !errors.Is(err, pyframes.ErrNotPythonFile) {
			t.Errorf("%v: %v, want ErrNotPythonFile", argv, err)
		}
	}
	if _, _, err := pyframes.CommandLayout([]string{"no-such-command-here"}, []string{"PATH=" + dir}); err == nil {
		t.Error("a command not in PATH: no error")
	}
}
