package trace

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/name (go test -update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n got: %q\nwant: %q\n(go test -update rewrites it)", path, got, want)
	}
}

// results builds one result per engine from the same calls: the
// tracepoint engine's with whole paths walked in the kernel (tp) and with
// the innermost frame alone (tp1, the fallback).
func results() (tp, tp1, pt *Result) {
	a := New()
	site := &Site{Function: "do_stats", File: "/app/t.py", Line: 3}
	for i := 0; i < 40; i++ {
		a.Add(Call{Name: "newfstatat", Dur: time.Duration(4000+i) * time.Nanosecond, Errno: "ENOENT", Site: site, SiteTried: true})
	}
	a.Add(Call{Name: "clock_nanosleep", Dur: 50 * time.Millisecond, SiteTried: true})
	wall := 1500 * time.Millisecond
	rows := a.Rows(wall, 3)
	acct := Account{Pid: 4242, Slow: time.Millisecond, Wall: wall, Calls: 41, ObserverCPU: 30 * time.Millisecond,
		Threads: 2, Restarted: 1, SiteReads: 41, SiteReadsFailed: 1, SiteReadError: "tid 7 ran no Python frame at the call"}
	tpa := acct
	tpa.Engine, tpa.Note, tpa.Slowdown, tpa.Events = "tracepoint", "(auto: BPF programs loaded)", TracepointSlowdown, 41
	tpa.Drops = &KernelDrops{Hist: 2}
	tpa.SiteReadsKernel, tpa.SiteReadsWalked, tpa.InProgress = 40, 3, 1
	blocked := []BlockedCall{{Tid: 4242, Name: "clock_nanosleep", ForUS: 12345.6, Site: &Site{Function: "nap", File: "/app/t.py", Line: 6}}}
	tpa1 := tpa
	tpa1.Walk = &StackWalk{Why: "the kernel refused the programs with the stack walk (bpf_loop: invalid argument)"}
	tp1 = &Result{Account: tpa1, Syscalls: rows, Blocked: blocked}
	// The same calls, their stacks walked: 25 from a shallow path, 14 from
	// a deep one (its middle elided in the text), 1 truncated.
	deep := []Site{*site}
	for i := 1; i < 9; i++ {
		deep = append(deep, Site{Function: fmt.Sprintf("layer%d", i), File: "/usr/lib/python3.12/site-packages/app/layers.py", Line: 10 * i})
	}
	deep = append(deep, Site{Function: "<module>", File: "/app/main.py", Line: 40})
	ka := New()
	for i := 0; i < 40; i++ {
		ka.Add(Call{Name: "newfstatat", Dur: time.Duration(4000+i) * time.Nanosecond, Errno: "ENOENT"})
	}
	ka.Add(Call{Name: "clock_nanosleep", Dur: 50 * time.Millisecond, SiteTried: true})
	ka.NoSiteWhy("clock_nanosleep", "no Python frame at the call")
	for i := 0; i < 40; i++ {
		switch {
		case i < 25:
			ka.AddPath("newfstatat", []Site{*site, {Function: "main", File: "/app/t.py", Line: 9}, {Function: "<module>", File: "/app/t.py", Line: 12}}, false)
		case i < 39:
			ka.AddPath("newfstatat", deep, false)
		default:
			ka.AddPath("newfstatat", deep[:3], true)
		}
	}
	tpa.Walk = &StackWalk{On: true, Walked: 39, Truncated: 1, NoFrame: 1, Distinct: 3}
	tp = &Result{Account: tpa, Syscalls: ka.Rows(wall, 3), Blocked: blocked}
	pta := acct
	pta.Engine, pta.Note, pta.Slowdown = "ptrace", "(auto: a spawned command runs under ptrace from its first instruction) (seccomp filter: untraced calls never stop)", SeccompSlowdown
	pta.Stopped, pta.Signals, pta.Spawned, pta.TargetExited, pta.ExitCode = 4*time.Millisecond, 2, true, true, 3
	pt = &Result{Account: pta, Syscalls: rows}
	return tp, tp1, pt
}

func TestRenderGolden(t *testing.T) {
	tp, tp1, pt := results()
	for _, c := range []struct {
		name string
		r    *Result
	}{{"tracepoint", tp}, {"tracepoint_oneframe", tp1}, {"ptrace", pt}} {
		var text, js, logged bytes.Buffer
		if err := Write(&text, "text", c.r, nil); err != nil {
			t.Fatal(err)
		}
		if err := Write(&js, "json", c.r, nil); err != nil {
			t.Fatal(err)
		}
		log, err := NewLogSink(nil, true)
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		_, _ = log.Write([]byte("4242    0.050000s clock_nanosleep(…) = 0  -\n"))
		_ = log.Flush()
		if err := Write(&logged, "text", c.r, log); err != nil {
			t.Fatal(err)
		}
		golden(t, "trace_"+c.name+".txt", text.Bytes())
		golden(t, "trace_"+c.name+".json", js.Bytes())
		golden(t, "trace_"+c.name+"_log.txt", logged.Bytes())
		golden(t, "trace_"+c.name+"_footer.txt", []byte(c.r.Footer("out.json")+"\n"))
	}
	if err := Write(&bytes.Buffer{}, "svg", tp, nil); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Fatalf("svg: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Engine: "auto"}, ""},
		{Options{Engine: "kernel"}, `unknown --engine "kernel"`},
		{Options{Engine: "ptrace", Duration: -1}, "--duration must not be negative"},
		{Options{Engine: "ptrace", Slow: -1}, "--slow must not be negative"},
		{Options{Engine: "tracepoint", Syscalls: "opnat"}, `unknown syscall "opnat" (did you mean openat`},
	} {
		err := c.o.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

func TestSeccompList(t *testing.T) {
	if seccompList(nil) != nil {
		t.Fatal("no filter: no seccomp list")
	}
	got := seccompList(map[int]bool{262: true, 257: true})
	if len(got) != 3 || got[0] != 257 || got[1] != 262 || got[2] != 219 {
		t.Fatalf("%v: want the sorted numbers, then restart_syscall (219)", got)
	}
	if got := seccompList(map[int]bool{219: true}); len(got) != 1 {
		t.Fatalf("%v: restart_syscall listed twice", got)
	}
}
