package diagnose

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"

	"github.com/pyobs/pyobs/internal/flame"
)

// WriteHTML writes the report as one self-contained page: the verdict,
// the tables and the flame graphs of the phases that ran (internal/flame's
// SVG, inlined with its script), with no external resource.
func WriteHTML(w io.Writer, rep *Report) error {
	d := htmlData{R: rep}
	for _, g := range []struct {
		id, title string
		p         *flame.Profile
		phase     string
	}{
		{"flame-cpu", "On-CPU samples (phase 2)", rep.CPUProfile, PhaseCPU},
		{"flame-offcpu", "Off-CPU waits, µs (phase 3; idle waits excluded)", rep.OffProfile, PhaseOffCPU},
	} {
		f := htmlFlame{ID: g.id, Title: g.title}
		if g.p == nil {
			f.Missing = "not run"
			for _, s := range rep.Skipped {
				if s.Phase == g.phase {
					f.Missing = "not run: " + s.Why
				}
			}
		} else {
			var buf bytes.Buffer
			title := fmt.Sprintf("pyobs diagnose: pid %d, %s", rep.Pid, g.title)
			if err := flame.WriteSVG(&buf, g.p, flame.SVGOptions{Title: title}); err != nil {
				return err
			}
			svg := buf.String()
			if i := strings.Index(svg, "<svg "); i >= 0 {
				svg = svg[i:] // the XML declaration has no place in HTML
			}
			f.SVG = template.HTML(svg) // our own renderer's output, escaped there
		}
		d.Flames = append(d.Flames, f)
	}
	var buf bytes.Buffer
	if err := htmlPage().Execute(&buf, d); err != nil {
		return fmt.Errorf("can't render the html report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

type htmlData struct {
	R      *Report
	Flames []htmlFlame
}

type htmlFlame struct {
	ID, Title, Missing string
	SVG                template.HTML
}

// htmlPage is parsed at its first use, not in every run of pyobs.
var htmlPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("diagnose").Funcs(template.FuncMap{
		"evidence": evidenceText,
		"inc":      func(i int) int { return i + 1 },
		"where": func(file string, line int) string {
			if file == "" {
				return ""
			}
			return fmt.Sprintf("%s:%d", file, line)
		},
		"pct": func(a, b float64) string {
			if b <= 0 {
				return "0"
			}
			return fmt.Sprintf("%.2f", 100*a/b)
		},
		"first": func(fs []string) string {
			if len(fs) == 0 {
				return "(no frames)"
			}
			return fs[0]
		},
	}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>pyobs diagnose: pid {{.R.Pid}} — {{.R.Verdict}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1300px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-size:1.3em;font-weight:bold}.incomplete{color:#a00;font-weight:bold}
code{font-size:.92em}.none{color:#777}
</style></head><body>
<h1>pyobs diagnose: pid {{.R.Pid}}{{if .R.Python}} (Python {{.R.Python}}){{end}}</h1>
<section id="verdict"><h2>Verdict</h2>
<p class="verdict">{{.R.Verdict}}</p><p>{{.R.Decision}}</p>
{{if not .R.Complete}}<p class="incomplete">Incomplete: {{.R.Interrupt}}</p>{{end}}
<p>Budget {{printf "%.1f" .R.BudgetS}} s, {{printf "%.1f" .R.ElapsedS}} s used. Plan:
{{range .R.Plan}}{{.Phase}} {{printf "%.1f" .BudgetS}} s; {{end}}</p></section>
<section id="findings"><h2>Findings (by weight)</h2>
<table><tr><th>#</th><th>phase</th><th>kind</th><th>summary</th><th>evidence</th><th>reproduce</th></tr>
{{range $i, $f := .R.Findings}}<tr><td class="n">{{inc $i}}</td><td>{{$f.Phase}}</td><td>{{$f.Kind}}</td><td>{{$f.Summary}}</td><td><code>{{evidence $f.Evidence}}</code></td><td><code>{{$f.Command}}</code></td></tr>
{{end}}</table></section>
<section id="ruled-out"><h2>Ruled out</h2>
{{if .R.RuledOut}}<table><tr><th>what</th><th>evidence</th></tr>
{{range .R.RuledOut}}<tr><td>{{.What}}</td><td>{{.Evidence}}</td></tr>
{{end}}</table>{{else}}<p class="none">Nothing: the procedure stopped at the first finding.</p>{{end}}</section>
<section id="counters"><h2>Counters (phase 1)</h2>
<table><tr><th>window</th><th>cores used</th><th>user / system</th><th>switches vol / invol</th><th>run-queue wait</th><th>throttled</th><th>RSS</th><th>threads</th></tr>
<tr><td class="n">{{printf "%.2f" .R.Counters.WindowS}} s</td><td class="n">{{printf "%.3f" .R.Counters.Utilization}}</td><td class="n">{{printf "%.2f" .R.Counters.UserS}} / {{printf "%.2f" .R.Counters.SystemS}} s</td>
<td class="n">{{.R.Counters.Voluntary}} / {{.R.Counters.Nonvoluntary}}</td><td class="n">{{printf "%.3f" .R.Counters.RunqueueWaitS}} s</td>
<td class="n">{{.R.Counters.NrThrottled}} of {{.R.Counters.NrPeriods}} periods, {{printf "%.3f" .R.Counters.ThrottledS}} s</td><td class="n">{{.R.Counters.RSSBytes}} B</td><td class="n">{{.R.Counters.Threads}}</td></tr></table></section>
<section id="hottest"><h2>Hottest (on-CPU, innermost Python frame)</h2>
{{if .R.Hottest}}<table><tr><th>%</th><th>samples</th><th>function</th><th>file:line</th></tr>
{{range .R.Hottest}}<tr><td class="n">{{printf "%.1f" .Percent}}</td><td class="n">{{.Samples}}</td><td>{{.Function}}</td><td>{{.File}}:{{.Line}}</td></tr>
{{end}}</table>{{else}}<p class="none">No on-CPU phase ran.</p>{{end}}</section>
<section id="waits"><h2>Waits (off-CPU, by class and innermost Python frame)</h2>
{{if .R.Waits}}<table><tr><th>seconds</th><th>class</th><th>function</th><th>file:line</th><th>threads</th><th>woken by</th></tr>
{{range .R.Waits}}<tr><td class="n">{{printf "%.3f" .Seconds}}</td><td>{{.Class}}</td><td>{{.Function}}</td><td>{{where .File .Line}}</td><td class="n">{{.Threads}}</td><td>{{.Waker}}</td></tr>
{{end}}</table>{{else}}<p class="none">No off-CPU phase ran.</p>{{end}}</section>
<section id="trace"><h2>Trace (phase 4)</h2>
{{if .R.Hypothesis}}<p>Hypothesis: {{.R.Hypothesis}}</p>
<table><tr><th>syscall</th><th>calls</th><th>errors</th><th>total s</th><th>p50 µs</th><th>p99 µs</th><th>in progress</th><th>Python site</th></tr>
{{range .R.Syscalls}}<tr><td>{{.Name}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Errors}}</td><td class="n">{{printf "%.3f" .TotalS}}</td><td class="n">{{printf "%.0f" .P50US}}</td><td class="n">{{printf "%.0f" .P99US}}</td><td class="n">{{.InProgress}}</td><td>{{.Site}}</td></tr>
{{end}}</table>{{else}}<p class="none">No trace: no wait named a syscall worth tracing.</p>{{end}}</section>
<section id="threads"><h2>Python threads (phase 5)</h2>
{{if .R.Threads}}<table><tr><th>tid</th><th>name</th><th>state</th><th>innermost frame</th><th>GIL</th></tr>
{{range .R.Threads}}<tr><td class="n">{{.Tid}}</td><td>{{.Name}}</td><td>{{.State}}</td><td>{{first .Frames}}</td><td>{{if .HoldsGIL}}yes{{end}}</td></tr>
{{end}}</table>{{if .R.Tasks}}<p>asyncio tasks: {{len .R.Tasks}}</p>{{end}}{{else}}<p class="none">No dump.</p>{{end}}</section>
<section id="price"><h2>Price</h2>
<table><tr><th>phase</th><th>price</th><th>mechanism</th><th>duration s</th><th>budget s</th><th>observer CPU s</th><th>target stopped s</th></tr>
{{range .R.Phases}}<tr><td>{{.Name}}</td><td>{{.Price}}</td><td>{{.Mechanism}}{{if .Error}} (error: {{.Error}}){{end}}</td><td class="n">{{printf "%.2f" .DurationS}}</td><td class="n">{{printf "%.2f" .BudgetS}}</td><td class="n">{{printf "%.4f" .ObserverCPUS}}</td><td class="n">{{printf "%.6f" .TargetStoppedS}}</td></tr>
{{end}}<tr><th>total</th><td></td><td>{{pct .R.Total.ObserverCPUS .R.Total.DurationS}} % of one CPU</td><td class="n">{{printf "%.2f" .R.Total.DurationS}}</td><td></td><td class="n">{{printf "%.4f" .R.Total.ObserverCPUS}}</td><td class="n">{{printf "%.6f" .R.Total.TargetStoppedS}}</td></tr></table>
{{if .R.Skipped}}<ul>{{range .R.Skipped}}<li>skipped {{.Phase}}: {{.Why}}</li>{{end}}</ul>{{end}}
{{if .R.Notes}}<ul>{{range .R.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
<p>Cannot see: {{range .R.CannotSee}}{{.}}; {{end}}</p></section>
{{range .Flames}}<section id="{{.ID}}" class="flame"><h2>{{.Title}}</h2>
{{if .SVG}}{{.SVG}}{{else}}<p class="none">{{.Missing}}</p>{{end}}</section>
{{end}}</body></html>
`))
})
