//go:build amd64

package kwalk_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// walking is a target with the kernel walker sampling it and the
// interpreter's threads in the walker's map.
type walking struct {
	tg *testutil.Target
	p  *pyframes.Process
	kl *pyframes.KernelLayout
	w  *kwalk.Walker
}

// startWalking starts script on in and a walker at freq over it; before
// opens anything that must precede the walker (nil: nothing). A kernel
// that refuses the program is a skip naming it.
func startWalking(t *testing.T, in testutil.Interp, freq int, before func(), script string, args ...string) *walking {
	t.Helper()
	return startWalkingWith(t, in, kwalk.Options{Freq: freq}, before, script, args...)
}

// startWalkingWith is startWalking with the walker's options.
func startWalkingWith(t *testing.T, in testutil.Interp, opt kwalk.Options, before func(), script string, args ...string) *walking {
	t.Helper()
	tg := testutil.Start(t, in, script, args...)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatalf("pyframes.Open: %v", err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatalf("KernelLayout: %v", err)
	}
	if before != nil {
		before()
	}
	w, err := kwalk.Open(tg.Pid, kl, opt)
	if errors.Is(err, kwalk.ErrUnavailable) {
		testutil.Skip(t, fmt.Sprintf("loading a perf_event eBPF program with bpf_loop: %v", err))
	}
	if err != nil {
		t.Fatalf("kwalk.Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	refs, err := p.ThreadRefs()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetThreads(refs); err != nil {
		t.Fatal(err)
	}
	return &walking{tg: tg, p: p, kl: kl, w: w}
}
