package diagnose

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteJSON writes the report as one indented JSON document (schema 1).
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report for a terminal.
func WriteText(w io.Writer, rep *Report) error {
	b := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("pyobs diagnose: pid %d", rep.Pid)
	if rep.Python != "" {
		p(" (Python %s)", rep.Python)
	}
	p(", budget %.1f s, %.1f s used\n", rep.BudgetS, rep.ElapsedS)
	if !rep.Complete {
		p("INCOMPLETE: %s\n", rep.Interrupt)
	}
	p("\nVerdict: %s\n  %s\n", rep.Verdict, rep.Decision)
	p("\nFindings (by weight)\n")
	for i, f := range rep.Findings {
		p("  %d. [%s] %s: %s\n", i+1, f.Phase, f.Kind, f.Summary)
		p("     evidence: %s\n", evidenceText(f.Evidence))
		p("     reproduce: %s\n", f.Command)
	}
	p("\nRuled out\n")
	if len(rep.RuledOut) == 0 {
		p("  (nothing: the procedure stopped at the first finding)\n")
	}
	for _, r := range rep.RuledOut {
		p("  - %s: %s\n", r.What, r.Evidence)
	}
	if len(rep.Hottest) > 0 {
		p("\nHottest (on-CPU samples by innermost Python frame)\n")
		for _, h := range rep.Hottest {
			p("  %6.1f %%  %s (%s:%d)\n", h.Percent, h.Function, h.File, h.Line)
		}
	}
	if len(rep.Waits) > 0 {
		p("\nWaits (off-CPU time by class and innermost Python frame; idle waits excluded)\n")
		for _, x := range rep.Waits {
			wk := ""
			if x.Waker != "" {
				wk = "  woken by " + x.Waker
			}
			p("  %9.3f s  %-13s %s  %d thread(s)%s\n", x.Seconds, x.Class, site(x.Function, x.File, x.Line), x.Threads, wk)
		}
	}
	if rep.Hypothesis != "" {
		p("\nTrace (phase 4) — hypothesis: %s\n", rep.Hypothesis)
		for _, s := range rep.Syscalls {
			p("  %-12s %6d calls %9.3f s  p50 %8.0f µs  p99 %8.0f µs  in progress %d  %s\n", s.Name, s.Calls, s.TotalS, s.P50US, s.P99US, s.InProgress, s.Site)
		}
	}
	if len(rep.Threads) > 0 {
		p("\nPython threads (phase 5)\n")
		for _, t := range rep.Threads {
			top := "(no frames)"
			if len(t.Frames) > 0 {
				top = t.Frames[0]
			}
			gil := ""
			if t.HoldsGIL {
				gil = " [GIL]"
			}
			p("  %-8d %-16s %-10s %s%s\n", t.Tid, t.Name, t.State, top, gil)
		}
		if len(rep.Tasks) > 0 {
			p("  asyncio tasks: %d (pyobs dump -p %d --tasks)\n", len(rep.Tasks), rep.Pid)
		}
	}
	p("\nPrice (each phase's mechanism and cost)\n")
	for _, ph := range rep.Phases {
		e := ""
		if ph.Error != "" {
			e = "  error: " + ph.Error
		}
		p("  %-8s %-25s %6.2f s (budget %5.2f s)  observer CPU %7.4f s  target stopped %.6f s  %s%s\n",
			ph.Name, ph.Price, ph.DurationS, ph.BudgetS, ph.ObserverCPUS, ph.TargetStoppedS, ph.Mechanism, e)
	}
	p("  total    %6.2f s, observer CPU %.4f s (%.2f %% of one CPU), target stopped %.6f s\n",
		rep.Total.DurationS, rep.Total.ObserverCPUS, 100*rep.Total.ObserverCPUS/max(rep.Total.DurationS, 1e-3), rep.Total.TargetStoppedS)
	for _, s := range rep.Skipped {
		p("  skipped %s: %s\n", s.Phase, s.Why)
	}
	for _, n := range rep.Notes {
		p("note: %s\n", n)
	}
	p("Cannot see: %s.\n", strings.Join(rep.CannotSee, "; "))
	return b.Flush()
}

// evidenceText renders an evidence map as "k=v, …" in key order.
func evidenceText(ev map[string]any) string {
	keys := make([]string, 0, len(ev))
	for k := range ev {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := ev[k]
		switch x := v.(type) {
		case float64:
			parts[i] = fmt.Sprintf("%s=%g", k, x)
		case *float64:
			if x == nil {
				parts[i] = k + "=null"
			} else {
				parts[i] = fmt.Sprintf("%s=%g", k, *x)
			}
		default:
			parts[i] = fmt.Sprintf("%s=%v", k, x)
		}
	}
	return strings.Join(parts, ", ")
}

// Write writes the report in a format: text ("" too), json or html.
func Write(w io.Writer, format string, rep *Report) error {
	switch format {
	case "json":
		return WriteJSON(w, rep)
	case "html":
		return WriteHTML(w, rep)
	}
	return WriteText(w, rep)
}
