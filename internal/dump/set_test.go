package dump

import (
	"bytes"
	"testing"
)

func setFixture() *SetDump {
	return &SetDump{Schema: Version, Kind: "process-set", DurationUS: 1234, Processes: []ProcessDump{
		{Pid: 10, How: "seed", Argv: []string{"python3", "app.py"}, Python: &PythonInfo{Version: "3.12.1", Binary: "/usr/bin/python3.12"},
			Read:    &ReadInfo{Method: "unsynchronised", DurationUS: 100},
			Threads: []ThreadDump{{Tid: 10, Name: "MainThread", Consistent: true, Frames: []FrameDump{{Function: "main", File: "app.py", Line: 3}}}}},
		{Pid: 11, Parent: 10, How: "fork", Argv: []string{"python3", "app.py"}, Python: &PythonInfo{Version: "3.12.1", Binary: "/usr/bin/python3.12"},
			Read:    &ReadInfo{Method: "ptrace-stopped", DurationUS: 90, StoppedUS: 40},
			Threads: []ThreadDump{{Tid: 11, Consistent: true, Frames: []FrameDump{{Function: "work", File: "app.py", Line: 9}}}}},
		{Pid: 12, How: "cgroup", Argv: []string{"sleep", "100"}, Refused: "pid 12 (sleep) is not a Python process"},
	}, Account: SetAccount{Seen: 3, Read: 2, Refused: 1}}
}

func TestWriteSetText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSetText(&b, setFixture()); err != nil {
		t.Fatal(err)
	}
	want := `pyobs dump: 3 processes: 2 read, 1 refused, in 1234 µs

process 10: python3 app.py, CPython 3.12.1 (/usr/bin/python3.12), 1 threads, read without stopping the target in 100 µs

Thread 10 "MainThread" (thread_id 0x0) 
  File "app.py", line 3, in main

process 11 [child of 10]: python3 app.py, CPython 3.12.1 (/usr/bin/python3.12), 1 threads, read with the target stopped for 40 µs in 90 µs

Thread 11 (main thread, no threading name) (thread_id 0x0) 
  File "app.py", line 9, in work

refused:
  process 12 [cgroup]: sleep 100: pid 12 (sleep) is not a Python process
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestSetDumpOne(t *testing.T) {
	sd := setFixture()
	if sd.One() != nil {
		t.Errorf("One of three processes is not nil")
	}
	sd.Processes = sd.Processes[:1]
	d := sd.One()
	if d == nil || d.Pid != 10 || d.Schema != Version || len(d.Threads) != 1 || d.Read.Method != "unsynchronised" {
		t.Errorf("One: %+v", d)
	}
	sd.Processes = []ProcessDump{{Pid: 12, Refused: "no"}}
	if sd.One() != nil {
		t.Errorf("One of a refused process is not nil")
	}
}
