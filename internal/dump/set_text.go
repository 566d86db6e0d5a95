package dump

import (
	"fmt"
	"io"

	"github.com/pyobs/pyobs/internal/procset"
)

// argvWidth is how much of a command line a process header shows.
const argvWidth = 60

// WriteSetText prints a set dump: the set's account, then each process
// read under its own header (`process N: argv…, CPython 3.x …`) with its
// threads as a one-process dump prints them, then the refused ones, each
// with its reason on one line.
func WriteSetText(w io.Writer, sd *SetDump) error {
	a := sd.Account
	fmt.Fprintf(w, "pyobs dump: %s: %d read, %d refused", plural(a.Seen, "process", "processes"), a.Read, a.Refused)
	if a.Exited > 0 {
		fmt.Fprintf(w, " (%d of them exited before their read)", a.Exited)
	}
	fmt.Fprintf(w, ", in %.0f µs\n", sd.DurationUS)
	for _, p := range sd.Processes {
		if p.Refused != "" {
			continue
		}
		fmt.Fprintln(w)
		d := &Dump{Pid: p.Pid, Python: *p.Python, Threads: p.Threads, Read: *p.Read, Native: p.Native}
		fmt.Fprintf(w, "process %d%s: %s, CPython %s (%s), %d threads, %s in %.0f µs\n",
			p.Pid, origin(p), argvText(p.Argv), d.Python.Version, d.Python.Binary, len(d.Threads), readHow(d.Read), d.Read.DurationUS)
		writeThreads(w, d)
	}
	if a.Refused > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "refused:")
		for _, p := range sd.Processes {
			if p.Refused != "" {
				fmt.Fprintf(w, "  process %d%s: %s: %s\n", p.Pid, origin(p), argvText(p.Argv), p.Refused)
			}
		}
	}
	return nil
}

// origin says how a process is in the set when that is not obvious.
func origin(p ProcessDump) string {
	switch p.How {
	case procset.Fork:
		return fmt.Sprintf(" [child of %d]", p.Parent)
	case procset.Cgroup:
		return " [cgroup]"
	}
	return ""
}

func argvText(argv []string) string {
	if len(argv) == 0 {
		return "(no command line)"
	}
	return procset.ShortArgv(argv, argvWidth)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
