package session

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// SetSpec is what a command observes beyond its one target: more pids,
// the children the targets fork, a cgroup's processes, every Python
// process. The zero value is the one target alone.
type SetSpec struct {
	Pids     []int  // more processes beside Spec.Pid (-p given several times)
	Children bool   // and every process they fork or spawn from now on (and the ones they have)
	Cgroup   string // every process of this cgroup v2 directory, including ones that enter it later
	All      bool   // every CPython process the caller may observe (at the start)
}

// Many reports whether the spec asks for more than one process.
func (s SetSpec) Many() bool {
	return len(s.Pids) > 0 || s.Children || s.Cgroup != "" || s.All
}

// Describe names what the spec holds beyond the session's target, for a
// start line: "2 more pid(s), children, cgroup /sys/fs/cgroup/app".
func (s SetSpec) Describe() string {
	var w []string
	if n := len(s.Pids); n > 0 {
		w = append(w, fmt.Sprintf("%d more pid(s)", n))
	}
	if s.Children {
		w = append(w, "children")
	}
	if s.Cgroup != "" {
		w = append(w, "cgroup "+s.Cgroup)
	}
	if s.All {
		w = append(w, "every Python process")
	}
	return strings.Join(w, ", ")
}

// Options are the set as internal/procset takes it, seeded with the
// session's target and the set's pids (a cgroup's processes and, with All,
// every Python process found at Open are among them).
func (s *Session) Options() procset.Options {
	seeds := []int{s.Pid}
	for _, p := range s.Set.Pids {
		if p != s.Pid {
			seeds = append(seeds, p)
		}
	}
	return procset.Options{Seeds: seeds, Children: s.Set.Children, Cgroup: s.Set.Cgroup}
}

// resolveSet turns --cgroup and --all into pids (the first Python one is
// the session's target) and checks each -p pid names a process.
func resolveSet(spec *Spec) error {
	set := &spec.Set
	fs := procfs.Default()
	for _, p := range set.Pids {
		if p <= 0 {
			return fmt.Errorf("invalid pid %d", p)
		}
		// A pid given that names no process is bad input, as a lone -p
		// is: seeded, it would sit in the kernel's set for the next
		// process to take that pid.
		if _, err := fs.Ppid(p); err != nil {
			return err
		}
	}
	if set.Cgroup != "" {
		if _, err := procfs.CgroupID(set.Cgroup); err != nil {
			return err
		}
		pids, err := procfs.CgroupProcs(set.Cgroup)
		if err != nil {
			return err
		}
		set.Pids = appendNew(set.Pids, pids...)
	}
	if set.All {
		pids, err := PythonProcesses()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return fmt.Errorf("--all: no CPython process that this user may read: %w", ErrNotPython)
		}
		set.Pids = appendNew(set.Pids, pids...)
	}
	if spec.Pid == 0 && len(spec.Argv) == 0 {
		if len(set.Pids) == 0 {
			if set.Cgroup != "" {
				return fmt.Errorf("cgroup %s has no process: %w", set.Cgroup, ErrNoProcess)
			}
			return errors.New("no target: give -p PID, --cgroup, --all or -- CMD ARGS")
		}
		spec.Pid = firstPython(set.Pids)
	}
	return nil
}

// firstPython is the first pid whose interpreter opens (else the first).
func firstPython(pids []int) int {
	for _, p := range pids {
		if isPython(p) {
			return p
		}
	}
	return pids[0]
}

func isPython(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	maps, err := pyframes.ReadMaps(pid)
	if err != nil {
		return false
	}
	_, err = pyframes.FindRuntime(pid, maps)
	return err == nil
}

// PythonProcesses lists every process whose CPython runtime this user can
// find (its maps readable, the runtime's symbols present), pyobs excluded.
func PythonProcesses() ([]int, error) {
	pids, err := procfs.Default().Pids()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, p := range pids {
		if isPython(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func appendNew(list []int, more ...int) []int {
	have := map[int]bool{}
	for _, p := range list {
		have[p] = true
	}
	for _, p := range more {
		if !have[p] {
			have[p] = true
			list = append(list, p)
		}
	}
	return list
}
