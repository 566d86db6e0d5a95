package stat

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/pyobs/pyobs/internal/report"
)

// argvWidth is how much of a command line a process line shows.
const argvWidth = 60

// WriteSetText renders a set's report: the set's header and account, the
// set's own report as one process's would read (verdicts over the whole
// set, sums), then one line per process before the threads.
func WriteSetText(w io.Writer, st *SetStat) error {
	var body bytes.Buffer
	if err := report.WriteStatText(&body, st.Total); err != nil {
		return err
	}
	// The one-process header line is the set's here.
	rest := body.String()
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[i+1:]
	}
	var b bytes.Buffer
	what := fmt.Sprintf("window %.2f s", st.WindowS)
	if st.Mode == "run" {
		what = fmt.Sprintf("whole run %.2f s", st.WindowS)
		if st.ExitCode != nil {
			what += fmt.Sprintf(", exit status %d", *st.ExitCode)
		}
	}
	a := st.Account
	fmt.Fprintf(&b, "pyobs stat: a set of %s, %s, %d threads\n", plural(a.Seen, "process", "processes"), what, len(st.Total.Threads))
	fmt.Fprintf(&b, "  processes: %d seen, %d joined during the window, %d exited, %d refused\n", a.Seen, a.Late, a.Exited, a.Refused)
	for _, n := range st.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	table := processTable(st)
	if i := strings.Index(rest, "\nthreads:\n"); i >= 0 {
		b.WriteString(rest[:i])
		b.WriteString(table)
		b.WriteString(rest[i:])
	} else {
		b.WriteString(rest)
		b.WriteString(table)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// processTable is the per-process section: one line each, in join order.
func processTable(st *SetStat) string {
	var b bytes.Buffer
	b.WriteString("\nprocesses (CPU in cores over the whole window; RSS at the end):\n")
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  PID\tPARENT\tHOW\tCPU\tUSER s\tSYS s\tRSS\tTHREADS\tVOL\tNONVOL\tMAJFLT\tLIFE\tNOW\tCOMMAND\n")
	for _, p := range st.Processes {
		parent := "-"
		if p.Parent > 0 {
			parent = fmt.Sprint(p.Parent)
		}
		if p.Refused != "" {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t\t\t\t\t\t\t\t\t\trefused: %s\t%s\n", p.Pid, parent, p.How, p.Refused, argvText(p.Argv, p.Comm))
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%.2f\t%.3f\t%.3f\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Pid, parent, p.How, p.Utilization, p.UserS, p.SystemS,
			bytesText(p.RSSBytes), p.Threads, p.Voluntary, p.Nonvoluntary, p.MajorFaults, life(p), nowText(p), argvText(p.Argv, p.Comm))
	}
	tw.Flush()
	return b.String()
}

// nowText is the main thread's state at the end, and how long the
// process was seen stopped by someone else.
func nowText(p ProcStat) string {
	if s := p.Stopped; s != nil {
		return fmt.Sprintf("%s, stopped (%s) %.1fs", p.State, s.State, s.Seconds)
	}
	return p.State
}

// life says when a process joined and left, relative to the window.
func life(p ProcStat) string {
	var parts []string
	switch {
	case p.Born:
		parts = append(parts, fmt.Sprintf("born +%.2fs", float64(p.JoinedNs)/1e9))
	case p.JoinedNs > 0:
		parts = append(parts, fmt.Sprintf("joined +%.2fs", float64(p.JoinedNs)/1e9))
	}
	if p.Exited {
		parts = append(parts, fmt.Sprintf("exited +%.2fs", float64(p.ExitedNs)/1e9))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func argvText(argv []string, comm string) string {
	if len(argv) == 0 {
		return "[" + comm + "]"
	}
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, r := range a {
			if unicode.IsControl(r) {
				r = ' '
			}
			b.WriteRune(r)
		}
	}
	s := strings.TrimSpace(b.String())
	if r := []rune(s); len(r) > argvWidth {
		s = string(r[:argvWidth-1]) + "…"
	}
	return s
}

func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
