//go:build amd64

package kwalk_test

import (
	"errors"
	"testing"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// TestOpenMemberRetriesOnlyWhileStarting: an interpreter that cannot be
// read (here: a pid /proc does not have, its exit not seen yet) is tried
// again only while its program is starting; after that it is refused for
// good, so an engine does not look at it every few ms for ever.
func TestOpenMemberRetriesOnlyWhileStarting(t *testing.T) {
	const pid = 1 << 30 // above pid_max's limit: never a process
	if _, err := pyframes.Open(pid); err == nil || errors.Is(err, pyframes.ErrNotPython) {
		t.Fatalf("pyframes.Open(%d): %v; want an error other than not-Python", pid, err)
	}
	put := func(int, *pyframes.KernelLayout) error { return nil }
	notGone := func(int) bool { return false }
	v := pyframes.Version{Major: 3, Minor: 12}
	if m := kwalk.OpenMember(pid, v, nil, true, true, put, notGone); !m.Retry || m.Refused == "" {
		t.Errorf("starting: %+v, want a retry", m)
	}
	if m := kwalk.OpenMember(pid, v, nil, true, false, put, notGone); m.Retry || m.Refused == "" {
		t.Errorf("not starting: %+v, want refused without a retry", m)
	}
	if m := kwalk.OpenMember(pid, v, nil, true, true, put, func(int) bool { return true }); !m.Gone || m.Retry {
		t.Errorf("gone: %+v, want gone without a retry", m)
	}
}
