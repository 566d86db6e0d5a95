package pyframes

import (
	"encoding/binary"
	"strings"
	"testing"
)

// The section as sid 3.15.2 carries it is read live in cmd/pyobs
// (TestTasks*); here the validation and the cycle search on made-up input.
func asyncioSection(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

func TestParseAsyncioOffsets(t *testing.T) {
	good := []uint64{200, 96, 104, 120, 121, 128, 176, 9000, 8000, 1200, 1100, 1108, 1116}
	o, err := ParseAsyncioOffsets(asyncioSection(good...))
	if err != nil {
		t.Fatal(err)
	}
	if o.TaskNode != 176 || o.TstateTasksHead != 1116 || o.InterpTasksHead != 8000 {
		t.Errorf("parsed %+v", o)
	}
	bad := map[string][]uint64{
		"does not fit":   {200, 96, 104, 120, 121, 128, 190, 9000, 8000, 1200, 1100, 1108, 1116}, // node+16 > size
		"implausible":    {0, 96, 104, 120, 121, 128, 176, 9000, 8000, 1200, 1100, 1108, 1116},
		"does not fit ":  {200, 96, 104, 120, 121, 128, 176, 9000, 9000, 1200, 1100, 1108, 1116},
		"does not fit  ": {200, 0, 104, 120, 121, 128, 176, 9000, 8000, 1200, 1100, 1108, 1116},
	}
	for want, v := range bad {
		if _, err := ParseAsyncioOffsets(asyncioSection(v...)); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("%v: error %v, want %q", v, err, want)
		}
	}
	if _, err := ParseAsyncioOffsets(make([]byte, 50)); err == nil {
		t.Error("short section accepted")
	}
}

func TestAwaitCycles(t *testing.T) {
	tasks := []AsyncTask{
		{Addr: 1}, // root
		{Addr: 2, AwaitedBy: []uint64{1}},
		{Addr: 3, AwaitedBy: []uint64{4}}, // 3 ↔ 4
		{Addr: 4, AwaitedBy: []uint64{3}},
		{Addr: 5, AwaitedBy: []uint64{5}},  // self
		{Addr: 6, AwaitedBy: []uint64{99}}, // awaiter not in any list
	}
	c := awaitCycles(tasks)
	if len(c) != 2 || len(c[0]) != 2 || len(c[1]) != 1 || c[1][0] != 5 {
		t.Errorf("cycles %v, want [[3 4] [5]]", c)
	}
	// A long chain does not blow up.
	var long []AsyncTask
	for i := uint64(1); i <= 50000; i++ {
		long = append(long, AsyncTask{Addr: i, AwaitedBy: []uint64{i + 1}})
	}
	long[len(long)-1].AwaitedBy = []uint64{1}
	if c := awaitCycles(long); len(c) > 1 {
		t.Errorf("%d cycles in one ring", len(c))
	}
}

func TestFrameStates(t *testing.T) {
	for _, m := range []int{14, 15} {
		st, ok := frameStatesFor(m)
		if !ok || st.yieldFrom == st.suspended || st.executing == st.created {
			t.Errorf("3.%d: %+v", m, st)
		}
	}
	if _, ok := frameStatesFor(13); ok {
		t.Error("3.13 has frame states for the task walk")
	}
}
