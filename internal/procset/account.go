package procset

import (
	"fmt"
	"strings"
)

// Account is what an engine's output says of one member process, before
// the engine's own measures (samples, off-CPU time, …), which a type
// embedding it adds; its JSON fields sit at that type's top level.
type Account struct {
	Pid      int      `json:"pid"`
	Parent   int      `json:"parent,omitempty"`
	How      string   `json:"how"` // seed, fork, cgroup
	Argv     []string `json:"argv,omitempty"`
	JoinedNS uint64   `json:"joined_ns,omitempty"` // CLOCK_MONOTONIC ns; 0 for a seed
	Exited   bool     `json:"exited"`
	Python   string   `json:"python,omitempty"`
	Refused  string   `json:"refused,omitempty"` // why its Python stacks were not walked or named
}

// AccountOf is m's account, without the Python part.
func AccountOf(m Member) Account {
	return Account{Pid: m.Pid, Parent: m.Parent, How: string(m.How), Argv: m.Argv, JoinedNS: m.Joined, Exited: m.Exited}
}

// Counts is the set's account in numbers, as the engines print it.
type Counts struct {
	Seen       int    `json:"seen"`             // processes that were members
	Late       int    `json:"joined_late"`      // joined after the start (forked, entered the cgroup)
	Exited     int    `json:"exited"`           // exited while observed
	Refused    int    `json:"refused"`          // members whose Python stacks were not walked or named (Account.Refused says why)
	EventsLost uint64 `json:"events_lost"`      // join/exit events the kernel had no room for
	MapFull    uint64 `json:"refused_map_full"` // processes that could not join: the kernel's map was full
}

// CountsOf is st as Counts; Refused is the engine's to count.
func CountsOf(st Stats) Counts {
	return Counts{Seen: st.Seen, Late: st.Late, Exited: st.Exited, EventsLost: st.Lost, MapFull: st.Full}
}

// Footer is the set's account for stderr: "pyobs ENGINE: processes: …",
// extra (the engine's own clause, "" for none) before the losses, then one
// line per process, what(i) being the engine's measures of Processes[i].
func Footer(engine string, c Counts, extra string, procs []Account, what func(i int) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pyobs %s: processes: %d seen, %d joined late, %d exited, %d refused", engine, c.Seen, c.Late, c.Exited, c.Refused)
	if extra != "" {
		b.WriteString("; " + extra)
	}
	if c.EventsLost > 0 || c.MapFull > 0 {
		fmt.Fprintf(&b, "; %d join/exit events lost, %d processes the kernel's map had no room for", c.EventsLost, c.MapFull)
	}
	for i, p := range procs {
		fmt.Fprintf(&b, "\n  pid %d (%s", p.Pid, p.How)
		if p.Parent != 0 {
			fmt.Fprintf(&b, " by %d", p.Parent)
		}
		if p.Exited {
			b.WriteString(", exited")
		}
		b.WriteString("): " + what(i))
		if p.Refused != "" {
			b.WriteString("; refused: " + p.Refused)
		}
		if len(p.Argv) > 0 {
			b.WriteString("; " + ShortArgv(p.Argv, 61))
		}
	}
	return b.String()
}
