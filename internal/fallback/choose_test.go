package fallback

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestChoose(t *testing.T) {
	refused := fmt.Errorf("load sched_switch program: %w", unix.EPERM)
	for _, c := range []struct {
		name    string
		want    Want
		try     error
		tried   bool
		useBPF  bool
		whyNone bool
	}{
		{"auto, loaded", Auto, nil, true, true, true},
		{"auto, refused", Auto, refused, true, false, false},
		{"bpf only, refused", BPFOnly, refused, true, false, false},
		{"bpf only, loaded", BPFOnly, nil, true, true, true},
		{"fallback only", NoBPF, refused, false, false, true},
	} {
		tried := false
		use, why := Choose(c.want, func() error { tried = true; return c.try })
		if tried != c.tried || use != c.useBPF || (why == nil) != c.whyNone {
			t.Errorf("%s: tried %v use %v why %v", c.name, tried, use, why)
		}
		if why != nil && !errors.Is(why, unix.EPERM) {
			t.Errorf("%s: why %v lost the errno", c.name, why)
		}
	}
}

func TestReason(t *testing.T) {
	if got := Reason(fmt.Errorf("pid 7: %w", unix.EPERM)); got != unix.EPERM.Error() {
		t.Errorf("errno: %q", got)
	}
	if got := Reason(errors.New("verifier: invalid mem access\nR1 type=ctx")); got != "verifier: invalid mem access" {
		t.Errorf("first line: %q", got)
	}
	if got := Reason(errors.New(strings.Repeat("x", 300))); len(got) != 200+len("…") {
		t.Errorf("long: %d bytes", len(got))
	}
	if !Denied(fmt.Errorf("x: %w", unix.EACCES)) || Denied(unix.ENOMEM) {
		t.Error("Denied")
	}
}
