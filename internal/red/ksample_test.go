//go:build amd64

package red

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/red/sampler"
)

// TestKsamplerJoin: a request claims its thread's ticks in [start, end]
// (one each) and the waits that began in it (their time in it, in
// periods, rounded); a tick of another thread or outside the request is
// not its; unclaimed ticks go to [no request], unclaimed waits nowhere;
// the profile has the route as root and waits end in [off cpu].
func TestKsamplerJoin(t *testing.T) {
	const ms = uint64(1e6)
	k := &ksampler{period: 5 * ms, stacks: map[uint64]*kstack{}, byTid: map[uint32][]khit{},
		prof: flame.New(flame.Meta{Command: "red", Unit: "samples"}), roots: map[string]int{}, frameIDs: map[StackFrame]int{}}
	add := func(id uint64, fn string) {
		st := &kstack{key: fn, frames: []StackFrame{{Function: fn, File: "a.py", Line: 1}, {Function: "main", File: "a.py", Line: 9}}}
		for i := len(st.frames) - 1; i >= 0; i-- {
			st.ids = append(st.ids, k.frameID(st.frames[i]))
		}
		k.stacks[id] = st
	}
	add(1, "compute")
	add(2, "sleep_handler")
	for _, h := range []sampler.Hit{
		{Time: 5 * ms, ID: 1, Tid: 7},                // before the request
		{Time: 40 * ms, ID: 2, Tid: 7, Dur: 40 * ms}, // a wait: 20 ms of it in the request
		{Time: 12 * ms, ID: 1, Tid: 7},
		{Time: 14 * ms, ID: 1, Tid: 8}, // another thread
		{Time: 15 * ms, ID: 1, Tid: 7},
		{Time: 20 * ms, ID: 9, Tid: 7},               // a stack that never arrived
		{Time: 90 * ms, ID: 2, Tid: 7, Dur: 90 * ms}, // idle, after it
	} {
		k.onHit(h)
	}
	got := k.join(80, "GET /x", true, 0, 7, 10*ms, 60*ms)
	n := map[string]int{}
	for _, s := range got {
		n[s.Key] += s.N
	}
	if n["compute"] != 2 || n["sleep_handler"] != 4 || n[""] != 1 || len(got) != 3 {
		t.Fatalf("joined %+v", got)
	}
	if k.acct.Joined != 3 || k.acct.JoinedWaits != 1 || k.acct.Unnamed != 1 {
		t.Errorf("account %+v", k.acct)
	}
	k.prune(^uint64(0))
	if k.acct.Outside != 2 {
		t.Errorf("outside %d, want 2 (tid 7 at 5 ms, tid 8)", k.acct.Outside)
	}
	var b bytes.Buffer
	if err := flame.WriteFolded(&b, k.prof); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"[no request];main (a.py:9);compute (a.py:1) 2",
		"[route] GET /x;[python stack lost] 1",
		"[route] GET /x;main (a.py:9);compute (a.py:1) 2",
		"[route] GET /x;main (a.py:9);sleep_handler (a.py:1);[off cpu] 4",
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("folded lacks %q:\n%s", w, b.String())
		}
	}
	if len(lines) != len(want) {
		t.Errorf("folded has %d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
}
