package dump

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/session"
)

// SetDump is a dump of a set of processes (several -p, --children,
// --cgroup, --all): each process's threads as a one-process Dump has them,
// and the processes that could not be read, each with its reason.
type SetDump struct {
	Schema    int           `json:"schema"`
	Kind      string        `json:"kind"` // "process-set"
	Processes []ProcessDump `json:"processes"`
	Account   SetAccount    `json:"account"`
	// DurationUS: the whole read, every process one after the other.
	DurationUS float64 `json:"duration_us"`
}

// ProcessDump is one process of a set: who it is, how it is in the set,
// and its threads (or why it was not read).
type ProcessDump struct {
	Pid    int         `json:"pid"`
	Parent int         `json:"parent,omitempty"`
	How    procset.How `json:"how"` // seed, fork (a descendant of a seed), cgroup
	Argv   []string    `json:"argv,omitempty"`
	// Refused: why the process was not read (not Python, no permission,
	// exited before its read); its threads are then absent.
	Refused string       `json:"refused,omitempty"`
	Exited  bool         `json:"exited,omitempty"` // gone before (or while) it was read
	Python  *PythonInfo  `json:"python,omitempty"`
	Threads []ThreadDump `json:"threads,omitempty"`
	Read    *ReadInfo    `json:"read,omitempty"`
	Native  *NativeInfo  `json:"native,omitempty"`
}

// SetAccount counts a set dump's processes.
type SetAccount struct {
	Seen    int `json:"seen"`
	Read    int `json:"read"`
	Refused int `json:"refused"` // the exited ones included
	Exited  int `json:"exited"`
}

// member is a process of the set as found at the dump's instant.
type member struct {
	pid, parent int
	how         procset.How
}

// members lists the set at this instant: the session's target and the
// other pids first (in the order given), then with Cgroup the processes
// that are in the cgroup now, then with Children every living descendant
// of those, each once.
func members(s *session.Session) []member {
	fs := s.FS
	var out []member
	have := map[int]bool{}
	add := func(pid int, how procset.How) {
		if pid <= 0 || have[pid] {
			return
		}
		have[pid] = true
		pp, _ := fs.Ppid(pid)
		out = append(out, member{pid: pid, parent: pp, how: how})
	}
	add(s.Pid, procset.Seed)
	var cg map[int]bool
	if s.Set.Cgroup != "" {
		cg = map[int]bool{}
		pids, _ := procfs.CgroupProcs(s.Set.Cgroup)
		for _, p := range pids {
			cg[p] = true
		}
	}
	for _, p := range s.Set.Pids {
		how := procset.Seed
		if cg[p] && !explicit(s, p) {
			how = procset.Cgroup
		}
		add(p, how)
	}
	if cg != nil {
		keys := make([]int, 0, len(cg))
		for p := range cg {
			keys = append(keys, p)
		}
		sort.Ints(keys)
		for _, p := range keys {
			add(p, procset.Cgroup) // entered the cgroup since the start
		}
	}
	if s.Set.Children {
		roots := append([]member{}, out...)
		for _, r := range roots {
			kids, _ := fs.Descendants(r.pid)
			for _, k := range kids {
				add(k, procset.Fork)
			}
		}
	}
	return out
}

// explicit: the pid is the session's own target (given with -p or the
// first Python process of a cgroup); the cgroup's others are "cgroup".
func explicit(s *session.Session, pid int) bool { return pid == s.Pid }

// RunSet dumps every process of the session's set, one after the other:
// with Lock each process is stopped for its own read and resumed before
// the next one is stopped (never two at once). A process that is not
// Python, may not be read or exited is listed as refused with its reason;
// when no process at all could be read, the target's own error is
// returned.
func RunSet(ctx context.Context, s *session.Session, opt Options) (*SetDump, error) {
	start := time.Now()
	sd := &SetDump{Schema: Version, Kind: "process-set", Processes: []ProcessDump{}}
	var first error
	for _, m := range members(s) {
		pd := ProcessDump{Pid: m.pid, Parent: m.parent, How: m.how}
		pd.Argv, _ = s.FS.Cmdline(m.pid)
		d, err := runOne(ctx, s, m.pid, opt)
		if err != nil {
			if first == nil || m.pid == s.Pid {
				first = err
			}
			pd.Refused = strings.ReplaceAll(err.Error(), "\n", " ")
			pd.Exited = gone(err)
		} else {
			pd.Python, pd.Threads, pd.Read, pd.Native = &d.Python, d.Threads, &d.Read, d.Native
			if pd.Threads == nil {
				pd.Threads = []ThreadDump{}
			}
		}
		sd.Processes = append(sd.Processes, pd)
	}
	for _, p := range sd.Processes {
		sd.Account.Seen++
		switch {
		case p.Refused == "":
			sd.Account.Read++
		case p.Exited:
			sd.Account.Exited++
			sd.Account.Refused++
		default:
			sd.Account.Refused++
		}
	}
	sd.DurationUS = float64(time.Since(start).Nanoseconds()) / 1e3
	if sd.Account.Read == 0 {
		if first == nil {
			first = fmt.Errorf("pid %d: %w", s.Pid, session.ErrNoProcess)
		}
		return nil, first
	}
	return sd, nil
}

// runOne dumps one process of the set: the session's own target through
// it, any other through a session of its own.
func runOne(ctx context.Context, s *session.Session, pid int, opt Options) (*Dump, error) {
	ps := s
	if pid != s.Pid {
		var err error
		if ps, err = session.Attach(pid); err != nil {
			return nil, err
		}
	}
	if ps.Py == nil { // opened with PythonOptional: the reason is kept
		if ps.PyErr != nil {
			return nil, ps.PyErr
		}
		return nil, fmt.Errorf("pid %d: %w", pid, session.ErrNotPython)
	}
	return Run(ctx, ps, opt)
}

// gone: the error says the process is no more.
func gone(err error) bool {
	return errors.Is(err, session.ErrNoProcess) || errors.Is(err, session.ErrZombie) || errors.Is(err, session.ErrExited)
}

// One is the set's only process as a one-process dump (nil when the set
// holds more than one process, or its one process was refused): what
// `dump -- CMD` prints when CMD has no children.
func (sd *SetDump) One() *Dump {
	if len(sd.Processes) != 1 || sd.Processes[0].Refused != "" {
		return nil
	}
	p := sd.Processes[0]
	return &Dump{Schema: sd.Schema, Pid: p.Pid, Python: *p.Python, Threads: p.Threads, Read: *p.Read, Native: p.Native}
}
