package red

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/procset"
)

// setResult is a report of a prefork server: one port, two workers, the
// set's account.
func setResult() *Result {
	var h Hist
	h.Add(2e6)
	return &Result{Version: JSONVersion, Pid: 100, Mode: "window", WindowS: 2, Price: Price,
		Ports: []PortReport{{Port: 8000, Proto: "http", Requests: 3, Errors: 1, Routes: []RouteReport{},
			NotParsed: []NotParsed{}, Workers: []WorkerReport{
				{Pid: 101, Requests: 2, Errors: 1, ErrorPct: 50, Duration: summarise(&h)},
				{Pid: 102, Requests: 1},
			}}},
		Slowest: []SlowReport{{Port: 8000, Pid: 101, Method: "GET", Path: "/a", Status: 200, Tid: 101, Stack: []StackFrame{}}},
		Processes: []procset.Member{
			{Pid: 100, How: procset.Seed, Argv: []string{"/usr/bin/python3", "server.py"}},
			{Pid: 101, Parent: 100, How: procset.Fork, Argv: []string{"/usr/bin/python3", "server.py"}, Joined: 5, Exited: true},
			{Pid: 102, Parent: 100, How: procset.Fork, Argv: []string{"/usr/bin/python3", "server.py", strings.Repeat("x", 80)}, Joined: 6},
		},
		ProcessCounts: &procset.Stats{Seen: 3, Late: 2, Exited: 1},
		Notes:         []string{}}
}

// TestWriteTextSet: a set's report names itself, lists each worker under
// its port and the slowest requests' processes, and ends with the
// account, argv shortened.
func TestWriteTextSet(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, setResult()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"pid 100 and its set (3 processes): RED per listening port, across processes",
		"per process (the one that accepted the connection):",
		"[pid 101] python3 server.py",
		"2 req      1 err (50.00%)",
		"(port 8000, pid 101, tid 101,",
		"processes: 3 seen, 2 joined late, 1 exited",
		"[pid 101] python3 server.py (fork of 100, exited)",
		"[pid 100] python3 server.py (seed)",
		"[pid 102] python3 server.py " + strings.Repeat("x", 41) + "… (fork of 100)",
		"[pid 102] python3 server.py " + strings.Repeat("x", 21) + "…       1 req      0 err ( 0.00%)     0 4xx  (no response)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestWriteJSONSet: workers, processes and process_counts in the JSON of
// a set; none of them (nor a slowest pid) for one process.
func TestWriteJSONSet(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, setResult(), false); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	ports := m["ports"].([]any)
	if w := ports[0].(map[string]any)["workers"].([]any); len(w) != 2 || w[0].(map[string]any)["pid"] != 101.0 {
		t.Errorf("workers %v", w)
	}
	if p := m["processes"].([]any); len(p) != 3 || m["process_counts"].(map[string]any)["joined_late"] != 2.0 {
		t.Errorf("processes %v, counts %v", p, m["process_counts"])
	}
	one := setResult()
	one.Processes, one.ProcessCounts, one.Ports[0].Workers, one.Slowest[0].Pid = nil, nil, nil, 0
	b.Reset()
	if err := WriteJSON(&b, one, false); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"workers"`, `"processes"`, `"process_counts"`, `"pid":0`} {
		if strings.Contains(b.String(), k) {
			t.Errorf("one process's JSON has %s: %s", k, b.String())
		}
	}
}

// TestWriteTextNoResponse: requests aborted before any response byte have
// no duration: the port's cells and the route's line say so ("-", "(no
// response)"), never 0µs.
func TestWriteTextNoResponse(t *testing.T) {
	r := &Result{Version: JSONVersion, Pid: 100, Mode: "window", WindowS: 2, Price: Price,
		Ports: []PortReport{{Port: 8000, Proto: "http", Requests: 3, Errors: 3, ErrorPct: 100,
			Aborted:   map[string]uint64{"reset before the response": 3},
			Routes:    []RouteReport{{Route: "GET /slow/:id", Requests: 3, Errors: 3}},
			NotParsed: []NotParsed{}}},
		Slowest: []SlowReport{}, Notes: []string{}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "0µs") || !strings.Contains(out, "(no response)") {
		t.Errorf("durations of requests without a response shown as a number:\n%s", out)
	}
	if !strings.Contains(out, "100.00   0.00        -        -        -        -        0") {
		t.Errorf("the port's duration cells are not -:\n%s", out)
	}
}
