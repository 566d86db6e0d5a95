package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status is /proc/PID/status (or task/TID/status): "Key:\tvalue" lines.
// Fields holds every line as the kernel wrote it (value trimmed); the
// typed fields are the ones pyobs decides on. prometheus/procfs reads this
// file too (Sample uses it for the memory and switch counters) but has no
// PPid, TracerPid or signal masks.
type Status struct {
	Fields    map[string]string
	Name      string
	State     string // "S (sleeping)"
	Tgid      int    // -1 when absent
	PPid      int    // -1 when absent
	TracerPid int    // -1 when absent
	NSpid     []int  // the id in each pid namespace, ours first, the innermost last
	SigCgt    uint64 // signals with a handler (bit N-1 for signal N)
	CapEff    uint64
}

// ParseStatus parses a status file. It never fails: a line it cannot read
// leaves its field at the zero value (-1 for the ids).
func ParseStatus(s string) Status {
	st := Status{Fields: map[string]string{}, Tgid: -1, PPid: -1, TracerPid: -1}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		st.Fields[k] = v
		switch k {
		case "Name":
			st.Name = v
		case "State":
			st.State = v
		case "Tgid":
			st.Tgid = atoiOr(v, -1)
		case "PPid":
			st.PPid = atoiOr(v, -1)
		case "TracerPid":
			st.TracerPid = atoiOr(v, -1)
		case "NSpid":
			st.NSpid = nil
			for _, x := range strings.Fields(v) {
				n, err := strconv.Atoi(x)
				if err != nil {
					st.NSpid = nil
					break
				}
				st.NSpid = append(st.NSpid, n)
			}
		case "SigCgt":
			st.SigCgt, _ = strconv.ParseUint(v, 16, 64)
		case "CapEff":
			st.CapEff, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	return st
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// Status reads /proc/PID/status (a task id works too: the kernel lists
// every thread at the top level, hidden from readdir).
func (f FS) Status(pid int) (Status, error) { return f.readStatus(pid, f.pidPath(pid, "status")) }

// TaskStatus reads /proc/PID/task/TID/status.
func (f FS) TaskStatus(pid, tid int) (Status, error) {
	return f.readStatus(pid, f.taskPath(pid, tid, "status"))
}

// SelfStatus reads the observer's own status.
func (f FS) SelfStatus() (Status, error) { return f.readStatus(os.Getpid(), f.SelfPath("status")) }

func (f FS) readStatus(pid int, path string) (Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Status{}, fmt.Errorf("pid %d: can't read %s: %w", pid, path, err)
	}
	return ParseStatus(string(b)), nil
}
