package procset

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFooter: the counts line, the engine's clause before the losses, one
// line per process with the engine's measures, its refusal and argv.
func TestFooter(t *testing.T) {
	procs := []Account{
		{Pid: 10, How: "seed", Argv: []string{"/usr/bin/python3", "app.py"}},
		{Pid: 11, Parent: 10, How: "fork", Exited: true, Refused: "another build"},
	}
	got := Footer("record", Counts{Seen: 2, Late: 1, Exited: 1, Refused: 1, EventsLost: 3}, "7 samples unreadable", procs,
		func(i int) string { return []string{"5 samples", "0 samples"}[i] })
	want := "pyobs record: processes: 2 seen, 1 joined late, 1 exited, 1 refused; 7 samples unreadable; 3 join/exit events lost, 0 processes the kernel's map had no room for\n" +
		"  pid 10 (seed): 5 samples; /usr/bin/python3 app.py\n" +
		"  pid 11 (fork by 10, exited): 0 samples; refused: another build"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestAccountJSON: an engine's type embedding Account and Counts keeps
// their fields at its top level.
func TestAccountJSON(t *testing.T) {
	type proc struct {
		Account
		Samples int `json:"samples"`
	}
	b, err := json.Marshal(struct {
		P proc `json:"p"`
		C Counts
	}{P: proc{Account: AccountOf(Member{Pid: 3, How: Fork, Parent: 2}), Samples: 4}, C: CountsOf(Stats{Seen: 2, Full: 1})})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"p":{"pid":3,"parent":2,"how":"fork","exited":false,"samples":4}`, `"seen":2`, `"refused_map_full":1`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("%s lacks %s", b, s)
		}
	}
}
