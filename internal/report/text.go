package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/pyobs/pyobs/internal/output"
	"github.com/pyobs/pyobs/internal/procfs"
)

// WriteStatJSON writes the document; indent for files and terminals, one
// line per document for streams (-i to a pipe).
func WriteStatJSON(w io.Writer, st *Stat, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(st)
}

// WriteStatText renders the report like perf stat + pidstat + time -v:
// verdicts first, then the USE sections, counters, and threads.
func WriteStatText(w io.Writer, st *Stat) error {
	bw := &errWriter{w: w}
	p := bw.printf
	what := fmt.Sprintf("window %.2f s", st.WindowS)
	if st.Mode == "run" {
		what = fmt.Sprintf("whole run %.2f s", st.WindowS)
		if st.ExitCode != nil {
			what += fmt.Sprintf(", exit status %d", *st.ExitCode)
		}
	}
	p("pyobs stat: pid %d (%s), %s, %d threads\n", st.Pid, output.Printable(st.Comm), what, len(st.Threads))
	if !st.Complete && st.Mode != "run" {
		p("  (incomplete: the process exited before the window ended; this is what was measured)\n")
	}
	for _, n := range st.Notes {
		p("  note: %s\n", n)
	}
	p("\nverdicts:\n")
	for _, f := range st.Findings {
		p("  %-19s %s\n", f.Code, f.Sentence)
		p("  %-19s   evidence: %s; threshold: %s\n", "", evidence(f.Evidence), f.Threshold)
		p("  %-19s   next: %s\n", "", f.Next)
	}

	p("\n")
	tp := func(format string, a ...any) {
		label, rest, _ := strings.Cut(fmt.Sprintf(format, a...), "\t")
		p("%-9s %s", label, strings.ReplaceAll(rest, "\t", "  "))
	}
	cpus := ""
	if st.CPU.OnlineCPUs > 0 {
		cpus = fmt.Sprintf(" of %d CPUs", st.CPU.OnlineCPUs)
	}
	tp("cpu\t%.2f cores%s\tuser %.3f s\tsystem %.3f s\n", st.CPU.Utilization, cpus, st.CPU.UserS, st.CPU.SystemS)
	rq := "run-queue wait n/a (schedstat off)"
	if st.Sched.SchedstatAvail {
		rq = fmt.Sprintf("run-queue wait %.3f s (%.1f %% of wanted CPU)", st.Sched.RunqueueWaitS, 100*st.Sched.RunqueueShare)
	}
	gone := ""
	if n := st.Sched.ExitedThreads; n > 0 {
		gone = fmt.Sprintf("\t%d exited threads in these to their last poll", n)
	}
	tp("sched\tvoluntary %d\tnonvoluntary %d\t%s\ttimeslices %d\tdelay accounting %s%s\n",
		st.Sched.Voluntary, st.Sched.Nonvoluntary, rq, st.Sched.Timeslices, st.Sched.DelayAcct, gone)
	m := st.Memory
	pss := "pss n/a"
	if m.PSSBytes != nil {
		pss = "pss " + humanBytes(*m.PSSBytes)
		if m.PSSAnonBytes != nil {
			pss += fmt.Sprintf(" (anon %s, file %s, shmem %s)", humanBytes(*m.PSSAnonBytes), humanBytes(*m.PSSFileBytes), humanBytes(*m.PSSShmemBytes))
		}
	}
	tp("memory\trss %s (%s)\t%s\thwm %s\tswap %s\tfaults minor %d, major %d\n",
		humanBytes(m.RSSBytes), signedBytes(m.RSSDeltaBytes), pss, humanBytes(m.HWMBytes), humanBytes(m.SwapBytes), m.MinorFaults, m.MajorFaults)
	if st.IO.Available {
		tp("io\trchar %s  wchar %s\tblock read %s  write %s\tsyscalls r %d, w %d\tfds %s\n",
			humanBytes(st.IO.RcharBytes), humanBytes(st.IO.WcharBytes), humanBytes(st.IO.ReadBytes), humanBytes(st.IO.WriteBytes),
			st.IO.ReadSyscalls, st.IO.WriteSyscalls, fds(st.IO))
	} else {
		tp("io\tn/a ("+procfs.Label("io")+" unreadable)\t\t\tfds %s\n", fds(st.IO))
	}
	c := st.Cgroup
	switch {
	case c.Version == 0:
		tp("cgroup\tnone found %s\n", c.Error)
	default:
		q := "no quota"
		if c.QuotaCores != nil {
			q = fmt.Sprintf("quota %.2f cores (%d/%d µs)", *c.QuotaCores, c.QuotaUS, c.PeriodUS)
		}
		tp("cgroup\tv%d %s\t%s\tperiods %d\tthrottled %d (%.1f ms)\n", c.Version, c.Path, q, c.NrPeriods, c.NrThrottled, c.ThrottledS*1000)
	}
	if st.Pressure.Source != "" {
		tp("pressure\t%s\tcpu %s\tmemory %s\tio %s\n", st.Pressure.Source, psi(st.Pressure.CPU), psi(st.Pressure.Memory), psi(st.Pressure.IO))
	}

	if len(st.Counters) > 0 {
		own := ""
		if st.CountersWindowS != nil {
			own = fmt.Sprintf("; over their own window, %.2f s, to the process's exit (the lines above end at the last read before it)", *st.CountersWindowS)
		}
		p("\ncounters (perf_event_open, all threads, inherited; a group's events share time slices%s):\n", own)
		tw := tabwriter.NewWriter(bw, 0, 8, 2, ' ', tabwriter.AlignRight)
		tp := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
		prevNote := ""
		for _, k := range st.Counters {
			note := k.Note
			if note == prevNote && note != "" {
				note = "(same)"
			} else {
				prevNote = note
			}
			name := k.Event
			if k.UserOnly {
				name += ":u"
			}
			switch {
			case !k.Supported:
				tp("<not supported>\t%s\t\t\t%s\n", name, note)
			case k.Value == nil:
				tp("<not counted>\t%s\t\t\t%s\n", name, note)
			default:
				val := commas(*k.Value)
				unit := ""
				extra := ""
				if k.Event == "task-clock" {
					val, unit = fmt.Sprintf("%.2f", *k.Value/1e6), "msec"
					if st.Ratios.CPUsUtilized != nil {
						extra = fmt.Sprintf("# %.3f CPUs utilized", *st.Ratios.CPUsUtilized)
					}
				}
				switch {
				case k.Event == "instructions" && st.Ratios.IPC != nil:
					extra = fmt.Sprintf("# %.2f insn per cycle", *st.Ratios.IPC)
				case k.Event == "cache-misses" && st.Ratios.CacheMissRatio != nil:
					extra = fmt.Sprintf("# %.2f %% of cache refs", 100**st.Ratios.CacheMissRatio)
				case k.Event == "branch-misses" && st.Ratios.BranchMissRatio != nil:
					extra = fmt.Sprintf("# %.2f %% of branches", 100**st.Ratios.BranchMissRatio)
				}
				scal := ""
				if k.Estimate {
					scal = fmt.Sprintf("(%.2f%%, estimate)", k.RunningPct)
				}
				tp("%s %s\t%s\t%s\t%s\t\n", val, unit, name, extra, scal)
			}
		}
		tw.Flush()
	}

	if len(st.Threads) > 0 {
		p("\nthreads:\n")
		tw := tabwriter.NewWriter(bw, 0, 8, 2, ' ', 0)
		tp := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
		tp("  TID\tNAME\tCPU\tUSER s\tSYS s\tVOL\tNONVOL\tRQ WAIT s\tMINFLT\tMAJFLT\tSEEN\tNOW\n")
		for _, t := range st.Threads {
			name := t.Name
			if t.PythonName != "" && t.PythonName != t.Comm {
				name = fmt.Sprintf("%s [%s]", t.PythonName, t.Comm)
			}
			name = output.Printable(name) // a thread's comm is its own to set (prctl)
			if t.New {
				name += " (new)"
			}
			tp("  %d\t%s\t%.2f\t%.3f\t%.3f\t%d\t%d\t%.4f\t%d\t%d\t%s\t%s\n", t.Tid, name, t.Utilization, t.UserS, t.SystemS,
				t.Voluntary, t.Nonvoluntary, t.RunqueueWaitS, t.MinorFaults, t.MajorFaults, dash(t.States), t.StateText)
		}
		tw.Flush()
	}
	return bw.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fds(io IO) string {
	if io.FDLimit == 0 {
		return fmt.Sprintf("%d", io.FDs)
	}
	return fmt.Sprintf("%d/%d", io.FDs, io.FDLimit)
}

func psi(w *PSIWindow) string {
	if w == nil {
		return "n/a"
	}
	s := fmt.Sprintf("some %.1f%%", w.SomePct)
	if w.FullPct != nil {
		s += fmt.Sprintf(" full %.1f%%", *w.FullPct)
	}
	return s
}

func evidence(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := m[k]
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			parts[i] = k + "=" + strconv.FormatInt(int64(v), 10)
		} else {
			parts[i] = k + "=" + strconv.FormatFloat(v, 'g', 6, 64)
		}
	}
	return strings.Join(parts, " ")
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func signedBytes(d int64) string {
	if d < 0 {
		return "-" + humanBytes(uint64(-d))
	}
	return "+" + humanBytes(uint64(d))
}

func commas(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) || math.Abs(v) >= 1e18 {
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
	n := int64(math.Round(v))
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
